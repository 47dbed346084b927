"""A 2-process DDP `transformers.Trainer` run with the tracer's callback (launched by torchrun;
the Trainer's accelerate backend sets up gloo on CPU)."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
import transformers

from implicit_em.trace.integrations.huggingface import TracerCallback


def main(out: str) -> None:
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        num_labels=3,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(0)
    ids, labels = (
        torch.randint(1, 40, (16, 10), generator=g),
        torch.randint(0, 3, (16,), generator=g),
    )
    data = [{"input_ids": x, "labels": int(y)} for x, y in zip(ids, labels, strict=True)]
    args = transformers.TrainingArguments(
        output_dir=f"{out}/trainer",
        per_device_train_batch_size=4,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.add_callback(TracerCallback(trainer, sinks=[f"jsonl:{out}/trace.jsonl"]))
    trainer.train()
    logs = [e for e in trainer.state.log_history if "trace/alarms" in e]
    with open(f"{out}/logs{trainer.args.process_index}.json", "w") as f:
        json.dump({"world": trainer.args.world_size, "logs": logs}, f)
    if dist.is_initialized():  # the Trainer's group: closed before exit, as PyTorch asks
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    # Every output is written and closed, and the process group is destroyed. The Trainer's own
    # collectives (DDP buckets, accelerate's gathers) can still be released by a gloo worker
    # thread while the interpreter finalizes, which aborts the process now and then
    # ("terminate called without an active exception") after all the work is done. Leave
    # without finalizing, so that the exit status speaks of the run alone.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

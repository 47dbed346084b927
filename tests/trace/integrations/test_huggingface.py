"""`TracerCallback` in a real `transformers.Trainer`: GPT-2 and BERT built from tiny configs
(random weights, no download), a few optimizer steps on CPU."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from implicit_em.trace import History  # noqa: E402
from implicit_em.trace.integrations.huggingface import TracerCallback  # noqa: E402

from ..browser import check_in_browser, needs_chromium  # noqa: E402


def _gpt2() -> torch.nn.Module:
    cfg = transformers.GPT2Config(
        vocab_size=40,
        n_positions=12,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(cfg)


def _bert(layers: int = 2) -> torch.nn.Module:
    cfg = transformers.BertConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        num_labels=3,
    )
    return transformers.BertForSequenceClassification(cfg)


def _data(n: int, labels: str) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 40, (n, 10), generator=g)
    if labels == "lm":
        return [{"input_ids": x, "labels": x} for x in ids]
    y = torch.randint(0, 3, (n,), generator=g)
    return [{"input_ids": x, "labels": int(c)} for x, c in zip(ids, y, strict=True)]


def _train(tmp_path, model, data, **kwargs) -> tuple:
    callback_kwargs = kwargs.pop("callback", {})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        **kwargs,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    callback = TracerCallback(
        trainer, sinks=[f"jsonl:{tmp_path / 'trace.jsonl'}"], **callback_kwargs
    )
    trainer.add_callback(callback)
    trainer.train()
    return trainer, History.from_jsonl(tmp_path / "trace.jsonl")


def _trace_logs(trainer) -> list[dict]:
    return [e for e in trainer.state.log_history if "trace/alarms" in e]


def test_gpt2_metrics_reach_log_history_at_the_logging_steps(tmp_path):
    trainer, history = _train(tmp_path, _gpt2(), _data(16, "lm"), max_steps=4, logging_steps=2)
    logs = _trace_logs(trainer)
    assert [e["step"] for e in logs] == [2, 4]
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == [2, 4]
    assert {r["step"] for r in history if r["kind"] == "site"} == {2, 4}
    entry = logs[0]
    assert 0 < entry["trace/attention/entropy/p50"] <= entry["trace/attention/entropy/max"]
    assert entry["trace/classification/residual/max"] < 1e-4
    assert "trace/classification/worst/lm_head.ce" in entry
    worst = [k for k in entry if k.startswith("trace/attention/worst/")]
    assert len(worst) == 2  # two layers, top_k=3
    assert history.sites("attention") == ["transformer.h.0.attn", "transformer.h.1.attn"]


def test_gradient_accumulation_is_one_measurement_per_optimizer_step(tmp_path):
    data = _data(32, "cls")
    trainer, history = _train(
        tmp_path,
        _bert(),
        data,
        max_steps=2,
        logging_steps=1,
        gradient_accumulation_steps=2,
    )
    sites = [r for r in history if r["kind"] == "site"]
    heads = [r for r in sites if r["type"] == "classification"]
    assert [r["step"] for r in heads] == [1, 2]
    assert all(r["rows"] == 8 for r in heads)  # two micro-batches of 4
    assert not any("#" in r["site"] for r in sites)
    assert [e["step"] for e in _trace_logs(trainer)] == [1, 2]


def test_bert_alarm_warns_and_stops_training(tmp_path, caplog):
    from implicit_em.trace import Thresholds

    strict = Thresholds(effective_k=1e9)  # every measured head raises `effective_k`
    with caplog.at_level(logging.WARNING, logger="implicit_em.trace"):
        trainer, history = _train(
            tmp_path,
            _bert(),
            _data(32, "cls"),
            max_steps=6,
            logging_steps=2,
            callback={"stop_on_alarm": True, "thresholds": strict},
        )
    assert trainer.state.global_step == 2
    assert _trace_logs(trainer)[0]["trace/alarms"] >= 1
    assert any("stopping training" in m for m in caplog.messages)
    assert any(r["alarm"] == "effective_k" for r in history.alarms())


def test_key_count_does_not_grow_with_depth(tmp_path):
    from implicit_em.trace.summary import BOOKKEEPING, key_bound

    counts, bounds = [], []
    for layers in (2, 6):
        trainer, history = _train(
            tmp_path / str(layers),
            _bert(layers),
            _data(8, "cls"),
            max_steps=1,
            logging_steps=1,
            callback={"top_k": 2},
        )
        counts.append(len(_trace_logs(trainer)[0]))
        # M_T: the scalar metrics the type's full records carry (the JSONL keeps them all)
        metrics: dict[str, set[str]] = {}
        for record in history.records:
            if "type" in record and "alarm" not in record:
                metrics.setdefault(record["type"], set()).update(
                    k
                    for k, v in record.items()
                    if isinstance(v, int | float)
                    and not isinstance(v, bool)
                    and k not in BOOKKEEPING
                )
        bounds.append(key_bound({t: len(m) for t, m in metrics.items()}, top_k=2))
    assert counts[0] == counts[1]
    assert bounds[0] == bounds[1]
    # the logged entry also holds `epoch`
    assert counts[1] - 1 <= bounds[1]


@needs_chromium
def test_page_of_a_trainer_run_in_chromium(tmp_path):
    pytest.importorskip("matplotlib")
    from typer.testing import CliRunner

    from implicit_em.cli import app

    _train(tmp_path, _gpt2(), _data(16, "lm"), max_steps=3, logging_steps=1)
    result = CliRunner().invoke(
        app, ["trace", "report", str(tmp_path / "trace.jsonl"), "--out", str(tmp_path / "page")]
    )
    assert result.exit_code == 0, result.output
    sections = {"summary", "type-attention", "type-classification", "alarms", "worst"}
    check_in_browser(tmp_path / "page" / "index.html", tmp_path, sections)


@pytest.mark.slow
def test_ddp_ranks_log_the_metrics_of_the_global_batch(tmp_path, torchrun):
    worker = Path(__file__).with_name("hf_ddp_worker.py")
    done = torchrun(worker, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"logs{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["logs"] == ranks[1]["logs"] and len(ranks[0]["logs"]) == 2
    history = History.from_jsonl(tmp_path / "trace.jsonl")  # written once, by rank 0
    heads = [r for r in history if r["kind"] == "site" and r["type"] == "classification"]
    assert [(r["step"], r["rows"]) for r in heads] == [(1, 8.0), (2, 8.0)]  # 2 ranks x 4 rows

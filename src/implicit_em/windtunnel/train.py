r"""Train one wind-tunnel configuration, with checkpoints, resumption and a JSON result.

:func:`run` trains ``config`` in ``out_dir``. Every training batch is fresh (drawn from a
generator seeded by ``config.seed``), the model is evaluated on a held-out set drawn from an
independent generator, and the whole state (model, optimizer, data generator, curves, elapsed
time) is written atomically to ``out_dir/checkpoint.pt`` every ``ckpt_every`` steps. Rerunning the
same configuration in the same directory resumes from the last checkpoint; a SIGINT/SIGTERM (or
an exhausted ``time_budget_s``) stops at the next step boundary after saving, so no finished step
is lost. A resumed run reproduces the uninterrupted run exactly: the only randomness after
initialization is the data generator, whose state is checkpointed.

Objectives, on the supervised positions, with distances ``d = -logits``:

* ``"ce"``: :func:`implicit_em.objectives.cross_entropy` (normalized, log-sum-exp);
* ``"sigmoid"``: :func:`implicit_em.objectives.sigmoid_bce` (independent per-answer sigmoids,
  unnormalized; the predictions are normalized only at evaluation).

Targets: ``"posterior"`` (the default) trains on the exact posterior as a soft target;
``"sample"`` trains on the answer drawn by the generative process (ordinary next-token training:
the posterior must be inferred from samples). Both have the posterior as their minimizer, since
both objectives are proper scoring rules; soft targets remove the sampling noise of the gradient.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from implicit_em.objectives import cross_entropy, sigmoid_bce
from implicit_em.windtunnel.metrics import position_errors, predictive_log_probs
from implicit_em.windtunnel.models import (
    GPT,
    GPTConfig,
    PrefixMLP,
    count_parameters,
    matched_mlp,
)
from implicit_em.windtunnel.tasks import Batch, Task, make_task
from implicit_em.windtunnel.tracing import AttentionTrace, summarize_trace

__all__ = [
    "RunConfig",
    "build_model",
    "evaluate",
    "learning_rate",
    "loss_fn",
    "preset",
    "run",
]

CHECKPOINT = "checkpoint.pt"
RESULT = "result.json"
TRACE = "trace.jsonl"
_PROBE_SIZE = 64
_EVAL_SEED_OFFSET = 1_000_003


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result (the device and thread count aside)."""

    task: str = "bijection"
    task_params: dict[str, int] = field(default_factory=lambda: {"n_symbols": 10})
    model: str = "transformer"
    objective: str = "ce"
    targets: str = "posterior"
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 64
    mlp_depth: int = 2
    sdpa: bool = True
    steps: int = 10_000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr_ratio: float = 0.02
    warmup: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 500
    n_test: int = 2048
    ckpt_every: int = 500
    seed: int = 0

    def __post_init__(self) -> None:
        if self.model not in ("transformer", "mlp"):
            raise ValueError(f"model must be 'transformer' or 'mlp', got {self.model!r}")
        if self.objective not in ("ce", "sigmoid"):
            raise ValueError(f"objective must be 'ce' or 'sigmoid', got {self.objective!r}")
        if self.targets not in ("sample", "posterior"):
            raise ValueError(f"targets must be 'sample' or 'posterior', got {self.targets!r}")
        if min(self.steps, self.batch_size, self.eval_every, self.ckpt_every, self.n_test) < 1:
            raise ValueError("steps, batch_size, eval_every, ckpt_every and n_test must be >= 1")

    def make_task(self) -> Task:
        return make_task(self.task, **self.task_params)


_TASK_SIZES: dict[str, dict[str, dict[str, int]]] = {
    "bijection": {
        "quick": {"n_symbols": 10},
        "default": {"n_symbols": 10},
        "paper": {"n_symbols": 20},
    },
    "hmm": {
        "quick": {"n_states": 3, "n_observations": 3, "length": 12},
        "default": {"n_states": 3, "n_observations": 3, "length": 12},
        "paper": {"n_states": 5, "n_observations": 5, "length": 16},
    },
    "dice": {
        "quick": {"n_faces": 2, "length": 16},
        "default": {"n_faces": 3, "length": 24},
        "paper": {"n_faces": 6, "length": 64},
    },
}

_SCALES: dict[str, dict[str, Any]] = {
    "quick": dict(
        n_layer=2, steps=1000, batch_size=64, lr=2e-3, warmup=100, eval_every=250, ckpt_every=250
    ),
    "default": dict(
        n_layer=3, steps=3000, batch_size=128, lr=2e-3, warmup=200, eval_every=250, ckpt_every=250
    ),
    "paper": dict(
        n_layer=6,
        n_head=6,
        n_embd=192,
        steps=100_000,
        batch_size=64,
        lr=3e-4,
        warmup=2000,
        eval_every=2000,
        ckpt_every=2000,
        n_test=8192,
    ),
}


def preset(task: str, scale: str = "default", **overrides: Any) -> RunConfig:
    """The configuration of ``task`` at ``scale`` (``quick`` | ``default`` | ``paper``).

    Every task trains on the exact posterior as a soft target by default (``targets="sample"``
    trains on drawn answers instead); ``overrides`` replace any field.
    """
    if task not in _TASK_SIZES:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(_TASK_SIZES)}")
    if scale not in _SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose from {sorted(_SCALES)}")
    base = RunConfig(task=task, task_params=dict(_TASK_SIZES[task][scale]), **_SCALES[scale])
    return replace(base, **overrides)


def build_model(config: RunConfig, task: Task) -> nn.Module:
    """The transformer of ``config``, or the MLP whose parameter count matches it."""
    gpt = GPTConfig(
        vocab_size=task.vocab_size,
        n_classes=task.n_classes,
        block_size=task.seq_len,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_embd=config.n_embd,
        sdpa=config.sdpa,
    )
    if config.model == "transformer":
        return GPT(gpt)
    return PrefixMLP(matched_mlp(gpt, depth=config.mlp_depth))


def loss_fn(logits: Tensor, batch: Batch, objective: str, targets: str) -> Tensor:
    """The training objective on the supervised positions (distances ``d = -logits``)."""
    d = -logits[batch.mask]
    t = (
        batch.posterior[batch.mask].to(d.dtype)
        if targets == "posterior"
        else batch.target[batch.mask]
    )
    if objective == "ce":
        return cross_entropy(d, t)
    return sigmoid_bce(d, t)


def learning_rate(config: RunConfig, step: int) -> float:
    r"""Linear warmup over ``warmup`` steps, then a cosine from ``lr`` to ``min_lr_ratio * lr``."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)


@torch.no_grad()
def evaluate(model: nn.Module, test: Batch, objective: str, chunk: int = 1024) -> dict[str, Any]:
    """Errors in bits of ``model`` on the held-out batch ``test`` (see :mod:`.metrics`)."""
    was_training = model.training
    model.eval()
    log_q = torch.cat(
        [
            predictive_log_probs(model(test.tokens[i : i + chunk]), objective)
            for i in range(0, test.tokens.shape[0], chunk)
        ]
    )
    model.train(was_training)
    errors = position_errors(test.posterior, log_q, test.mask)

    def curve(x: Tensor) -> list[float | None]:
        return [None if math.isnan(v) else v for v in x.tolist()]

    return {
        "bits_mae": errors.bits_mae,
        "kl_bits": errors.kl_mean,
        "per_position": {
            "entropy_mae": curve(errors.entropy_mae),
            "kl": curve(errors.kl),
            "entropy": curve(errors.entropy),
        },
    }


class _StopRequest:
    """Set by SIGINT/SIGTERM; the loop stops at the next step boundary."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True


@contextmanager
def _graceful_stop() -> Iterator[_StopRequest]:
    stop = _StopRequest()
    try:
        previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals cannot be caught here
        yield stop
        return
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _write_json(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def _load_matching(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state["config"] != config:
        raise ValueError(
            f"{path} belongs to a different configuration; use another --out directory "
            "or delete it to start over"
        )
    return state


def run(
    config: RunConfig,
    out_dir: str | Path,
    device: str = "cpu",
    progress: bool = True,
    time_budget_s: float | None = None,
    trace_every: int | None = None,
) -> dict[str, Any]:
    """Train (or resume, or reload) ``config`` in ``out_dir`` and return its result.

    Returns the result dictionary, also written to ``out_dir/result.json`` when the run is
    complete: ``status`` (``"complete"`` or ``"interrupted"``), ``config``, ``n_parameters``,
    ``steps`` done, ``wall_time_s`` (training time summed over sessions), held-out ``bits_mae``
    and ``kl_bits`` with their ``per_position`` curves, and the training ``history``. A complete
    result already present for the same configuration is returned without training.

    ``trace_every`` (transformer only) traces the attention sites every that many steps with
    :class:`~implicit_em.windtunnel.tracing.AttentionTrace`: the records go to
    ``out_dir/trace.jsonl`` and their two-timescale summary to the result's ``trace``. Tracing
    does not change training.
    """
    if trace_every is not None and config.model != "transformer":
        raise ValueError("tracing reads attention sites: it needs --model transformer")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = asdict(config)
    result_path = out / RESULT
    if result_path.exists():
        done = json.loads(result_path.read_text())
        if done["config"] == cfg:
            return done
    task = config.make_task()
    torch.manual_seed(config.seed)
    model = build_model(config, task).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.95)
    )
    data = torch.Generator().manual_seed(config.seed)
    test = task.sample(
        config.n_test, torch.Generator().manual_seed(config.seed + _EVAL_SEED_OFFSET)
    )
    test = test.to(device)
    history: dict[str, list[float]] = {
        "step": [],
        "loss": [],
        "eval_step": [],
        "eval_bits_mae": [],
        "eval_kl": [],
    }
    step, elapsed, sessions = 0, 0.0, 0
    running, count = 0.0, 0
    trace_records: list[dict[str, Any]] = []
    state = _load_matching(out / CHECKPOINT, cfg)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        data.set_state(state["data_rng"])
        history, step, elapsed = state["history"], state["step"], state["elapsed"]
        sessions, (running, count) = state["sessions"], state["running"]
        trace_records = state["trace"]
    sessions += 1

    def checkpoint() -> None:
        _save_atomic(
            {
                "config": cfg,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "data_rng": data.get_state(),
                "history": history,
                "step": step,
                "elapsed": elapsed,
                "sessions": sessions,
                "running": (running, count),
                "trace": trace_records,
            },
            out / CHECKPOINT,
        )

    model.train()
    start = time.perf_counter()
    bar = tqdm(
        total=config.steps,
        initial=step,
        disable=not progress,
        desc=f"{config.model}/{config.objective}",
    )
    tracer = (
        AttentionTrace(model, test.tokens[:_PROBE_SIZE], trace_every, trace_records, step)
        if trace_every is not None
        else None
    )
    quiet = tracer.quiet if tracer is not None else nullcontext
    with _graceful_stop() as stop, tracer or nullcontext():
        while step < config.steps:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step)
            batch = task.sample(config.batch_size, data).to(device)
            loss = loss_fn(model(batch.tokens), batch, config.objective, config.targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            if tracer is not None:
                tracer.step()
            step += 1
            running, count = running + loss.item(), count + 1
            bar.update(1)
            if step % config.eval_every == 0 or step == config.steps:
                history["step"].append(step)
                history["loss"].append(running / count)
                running, count = 0.0, 0
                with quiet():
                    ev = evaluate(model, test, config.objective)
                history["eval_step"].append(step)
                history["eval_bits_mae"].append(ev["bits_mae"])
                history["eval_kl"].append(ev["kl_bits"])
                bar.set_postfix(loss=f"{history['loss'][-1]:.4f}", bits_mae=f"{ev['bits_mae']:.4f}")
            out_of_time = time_budget_s is not None and time.perf_counter() - start >= time_budget_s
            if step % config.ckpt_every == 0 or stop.requested or out_of_time:
                elapsed += time.perf_counter() - start
                start = time.perf_counter()
                checkpoint()
            if (stop.requested or out_of_time) and step < config.steps:
                bar.close()
                return {
                    "status": "interrupted",
                    "config": cfg,
                    "steps": step,
                    "wall_time_s": elapsed,
                }
    bar.close()
    elapsed += time.perf_counter() - start
    checkpoint()
    final = evaluate(model, test, config.objective)
    result = {
        "status": "complete",
        "config": cfg,
        "task": {
            "name": task.name,
            "vocab_size": task.vocab_size,
            "seq_len": task.seq_len,
            "n_classes": task.n_classes,
        },
        "n_parameters": count_parameters(model),
        "steps": step,
        "wall_time_s": elapsed,
        "sessions": sessions,
        "device": device,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **final,
        "history": history,
    }
    if trace_every is not None:
        (out / TRACE).write_text("".join(json.dumps(r) + "\n" for r in trace_records))
        result["trace"] = {
            "every": trace_every,
            "file": TRACE,
            "summary": summarize_trace(trace_records),
        }
    _write_json(result, result_path)
    return result

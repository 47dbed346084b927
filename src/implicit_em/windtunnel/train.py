r"""Train one wind-tunnel configuration, with checkpoints, resumption and a JSON result.

`run` trains `config` in `out_dir`. Every training batch is fresh (drawn from a
generator seeded by `config.seed`), the model is evaluated on a held-out set drawn from an
independent generator, and the whole state (model, optimizer, data generator, curves, elapsed
time) is written atomically to `out_dir/checkpoint.pt` every `ckpt_every` steps. Rerunning the
same configuration in the same directory resumes from the last checkpoint; a SIGINT/SIGTERM (or
an exhausted `time_budget_s`) stops at the next step boundary after saving, so no finished step
is lost. A resumed run reproduces the uninterrupted run exactly: the only randomness after
initialization is the data generator, whose state is checkpointed.

Objectives, on the supervised positions, with distances `d = -logits`:

* `"ce"`: `implicit_em.objectives.cross_entropy` (normalized, log-sum-exp);
* `"sigmoid"`: `implicit_em.objectives.sigmoid_bce` (independent per-answer sigmoids,
  unnormalized; the predictions are normalized only at evaluation).

Targets: `"sample"` (the bijection's default, as in the reference protocol) trains on the
answer drawn by the generative process (ordinary next-token training: the posterior must be
inferred from samples); `"posterior"` (the HMM's and the dice's default) trains on the exact
posterior as a soft target. Both have the posterior as their minimizer, since both objectives are
proper scoring rules; soft targets remove the sampling noise of the gradient.

Models: `"transformer"` (`GPT`), `"mlp-prefix"` (`PrefixMLP`,
sees the whole prefix; `"mlp"` is an alias kept for old commands) and `"mlp-pos"`
(`PositionMLP`, position-wise, cannot see the context), the MLPs matched to the
transformer's parameter count.
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
    NORMS,
    GPTConfig,
    PositionMLP,
    PrefixMLP,
    count_parameters,
    matched_mlp,
    matched_position_mlp,
)
from implicit_em.windtunnel.tasks import Batch, Task, make_task
from implicit_em.windtunnel.tracing import AttentionTrace, summarize_trace

__all__ = [
    "MODELS",
    "SCALES",
    "RunConfig",
    "build_model",
    "config_differences",
    "evaluate",
    "held_out",
    "learning_rate",
    "loss_fn",
    "preset",
    "run",
]

CHECKPOINT = "checkpoint.pt"
RESULT = "result.json"
TRACE = "trace.jsonl"
SNAPSHOTS = "snapshots.pt"
_PROBE_SIZE = 64
_EVAL_SEED_OFFSET = 1_000_003
MODELS = ("transformer", "mlp-prefix", "mlp-pos")
_MODEL_ALIASES = {"mlp": "mlp-prefix"}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result (the device and thread count aside)."""

    task: str = "bijection"
    task_params: dict[str, int | bool | None] = field(default_factory=lambda: {"n_symbols": 10})
    model: str = "transformer"
    objective: str = "ce"
    targets: str = "sample"
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 64
    mlp_depth: int = 2
    sdpa: bool = True
    norm: str = "layernorm"
    split_qkv: bool = False
    value_lr_mult: float = 1.0
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
        object.__setattr__(self, "model", _MODEL_ALIASES.get(self.model, self.model))
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS} (or 'mlp'), got {self.model!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.value_lr_mult <= 0:
            raise ValueError(f"value_lr_mult must be > 0, got {self.value_lr_mult}")
        if self.value_lr_mult != 1.0 and not (self.split_qkv and self.model == "transformer"):
            raise ValueError("value_lr_mult != 1 needs model='transformer' and split_qkv=True")
        if self.objective not in ("ce", "sigmoid"):
            raise ValueError(f"objective must be 'ce' or 'sigmoid', got {self.objective!r}")
        if self.targets not in ("sample", "posterior"):
            raise ValueError(f"targets must be 'sample' or 'posterior', got {self.targets!r}")
        if min(self.steps, self.batch_size, self.eval_every, self.ckpt_every, self.n_test) < 1:
            raise ValueError("steps, batch_size, eval_every, ckpt_every and n_test must be >= 1")

    def make_task(self) -> Task:
        return make_task(self.task, **self.task_params)


_TASK_SIZES: dict[str, dict[str, dict[str, int | bool]]] = {
    "bijection": {
        "quick": {"n_symbols": 10},
        "default": {"n_symbols": 10},
        "paper": {"n_symbols": 20},
        "reference": {"n_symbols": 20, "n_pairs": 19, "replacement": False},
        "reference-cpu": {"n_symbols": 20, "n_pairs": 19, "replacement": False},
    },
    "hmm": {
        "quick": {"n_states": 3, "n_observations": 3, "length": 12},
        "default": {"n_states": 3, "n_observations": 3, "length": 12},
        "paper": {"n_states": 5, "n_observations": 5, "length": 16},
        "reference": {"n_states": 5, "n_observations": 5, "length": 20, "levels": 100, "floor": 5},
        "reference-cpu": {
            "n_states": 5,
            "n_observations": 5,
            "length": 20,
            "levels": 100,
            "floor": 5,
        },
    },
    "dice": {
        "quick": {"n_faces": 2, "length": 16},
        "default": {"n_faces": 3, "length": 24},
        "paper": {"n_faces": 6, "length": 64},
        "reference": {"n_faces": 6, "length": 64},
        "reference-cpu": {"n_faces": 3, "length": 24},
    },
}

_TARGETS = {"bijection": "sample", "hmm": "posterior", "dice": "posterior"}
"""Default targets per task: the reference protocol trains the bijection on sampled answers and
the HMM on the exact filter."""

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
    "reference": dict(
        n_layer=6,
        n_head=6,
        n_embd=192,
        norm="rmsnorm",
        steps=100_000,
        batch_size=128,
        lr=3e-4,
        warmup=2000,
        weight_decay=0.1,
        grad_clip=1.0,
        eval_every=2000,
        ckpt_every=2000,
        n_test=8192,
    ),
    "reference-cpu": dict(
        n_layer=2,
        n_head=4,
        n_embd=64,
        norm="rmsnorm",
        steps=3000,
        batch_size=64,
        lr=2e-3,
        warmup=200,
        weight_decay=0.1,
        grad_clip=1.0,
        eval_every=500,
        ckpt_every=500,
        n_test=2048,
    ),
}
SCALES = tuple(_SCALES)
"""`quick` / `default`: CPU minutes; `paper`: the older GPU setting; `reference`: the
published protocol (6 x 6 x 192, RMSNorm, batch 128, lr 3e-4, 2k warmup, weight decay 0.1, clip 1,
100k steps; bijection V = 20, L = 19, sampled answers; HMM 5 x 5, T = 20, 0.01 grid, minimum 0.05,
exact filter as target), for a GPU; `reference-cpu`: the same tasks and targets with a smaller
transformer and fewer steps, for a 2-core CPU."""


def preset(task: str, scale: str = "default", **overrides: Any) -> RunConfig:
    """The configuration of `task` at `scale` (one of `SCALES`).

    The bijection trains on sampled answers and the other tasks on the exact posterior by default
    (`targets=...` overrides); `overrides` replace any field.
    """
    if task not in _TASK_SIZES:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(_TASK_SIZES)}")
    if scale not in _SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose from {list(_SCALES)}")
    base = RunConfig(
        task=task,
        task_params=dict(_TASK_SIZES[task][scale]),
        targets=_TARGETS[task],
        **_SCALES[scale],
    )
    return replace(base, **overrides)


def build_model(config: RunConfig, task: Task) -> nn.Module:
    """The transformer of `config`, or the MLP control whose parameter count matches it."""
    gpt = GPTConfig(
        vocab_size=task.vocab_size,
        n_classes=task.n_classes,
        block_size=task.seq_len,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_embd=config.n_embd,
        sdpa=config.sdpa,
        norm=config.norm,
        split_qkv=config.split_qkv,
    )
    if config.model == "transformer":
        return GPT(gpt)
    if config.model == "mlp-pos":
        return PositionMLP(matched_position_mlp(gpt))
    return PrefixMLP(matched_mlp(gpt, depth=config.mlp_depth))


def _parameter_groups(model: nn.Module, config: RunConfig) -> list[dict[str, Any]]:
    """One group, or two when the values (`attn.value`) train at `value_lr_mult` x the lr."""
    if config.value_lr_mult == 1.0:
        return [{"params": list(model.parameters()), "lr_mult": 1.0}]
    values = [p for n, p in model.named_parameters() if ".attn.value." in n]
    rest = [p for n, p in model.named_parameters() if ".attn.value." not in n]
    return [
        {"params": rest, "lr_mult": 1.0},
        {"params": values, "lr_mult": config.value_lr_mult},
    ]


def held_out(config: RunConfig) -> Batch:
    """The fixed held-out batch of `config` (`n_test` sequences from their own generator)."""
    generator = torch.Generator().manual_seed(config.seed + _EVAL_SEED_OFFSET)
    return config.make_task().sample(config.n_test, generator)


def loss_fn(logits: Tensor, batch: Batch, objective: str, targets: str) -> Tensor:
    """The training objective on the supervised positions (distances `d = -logits`)."""
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
    r"""Linear warmup over `warmup` steps, then a cosine from `lr` to `min_lr_ratio * lr`."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)


@torch.no_grad()
def evaluate(model: nn.Module, test: Batch, objective: str, chunk: int = 1024) -> dict[str, Any]:
    """Errors in bits of `model` on the held-out batch `test` (see `metrics`)."""
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


def config_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys (dotted for nested dictionaries) whose values differ between two configurations."""
    keys = sorted(set(old) | set(new))
    out = []
    for key in keys:
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, f"{prefix}{key}.")
        elif a != b or (key in old) != (key in new):
            out.append(f"{prefix}{key}")
    return out


def _refuse_other(path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    if old != new:
        diff = ", ".join(config_differences(old, new))
        raise ValueError(
            f"{path} belongs to a different configuration (differs in: {diff}); it is never "
            "resumed with another one: use another --out directory or delete it to start over"
        )


def _load_matching(path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    _refuse_other(path, state["config"], config)
    return state


def run(
    config: RunConfig,
    out_dir: str | Path,
    device: str = "cpu",
    progress: bool = True,
    time_budget_s: float | None = None,
    trace_every: int | None = None,
    snapshot_every: int | None = None,
) -> dict[str, Any]:
    """Train (or resume, or reload) `config` in `out_dir` and return its result.

    Returns the result dictionary, also written to `out_dir/result.json` when the run is
    complete: `status` (`"complete"` or `"interrupted"`), `config`, `n_parameters`,
    `steps` done, `wall_time_s` (training time summed over sessions), held-out `bits_mae`
    and `kl_bits` with their `per_position` curves, and the training `history`. A complete
    result already present for the same configuration is returned without training.

    `trace_every` (transformer only) traces the attention sites every that many steps with
    `AttentionTrace`: the records go to
    `out_dir/trace.jsonl` and their two-timescale summary to the result's `trace`. Tracing
    does not change training.

    `snapshot_every` keeps a copy of the model's weights every that many steps (and at the
    end) in `out_dir/snapshots.pt` (`{"steps": [...], "states": [...]}`), for measuring how
    far each part is from its final value (`timescales`).

    A directory that holds a checkpoint or a result of another configuration is refused with
    the differing keys named; checkpoints are never mixed.
    """
    if trace_every is not None and config.model != "transformer":
        raise ValueError("tracing reads attention sites: it needs --model transformer")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = asdict(config)
    result_path = out / RESULT
    if result_path.exists():
        done = json.loads(result_path.read_text())
        _refuse_other(result_path, done["config"], cfg)
        if snapshot_every is not None and "snapshots" not in done:
            raise ValueError(f"{result_path} was run without snapshots; use another directory")
        if trace_every is not None and "trace" not in done:
            raise ValueError(f"{result_path} was run without tracing; use another directory")
        return done
    task = config.make_task()
    torch.manual_seed(config.seed)
    model = build_model(config, task).to(device)
    optimizer = torch.optim.AdamW(
        _parameter_groups(model, config),
        lr=config.lr,
        weight_decay=config.weight_decay,
        betas=(0.9, 0.95),
    )
    data = torch.Generator().manual_seed(config.seed)
    test = held_out(config).to(device)
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
    snapshots: dict[str, list[Any]] = {"steps": [], "states": []}
    state = _load_matching(out / CHECKPOINT, cfg)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        data.set_state(state["data_rng"])
        history, step, elapsed = state["history"], state["step"], state["elapsed"]
        sessions, (running, count) = state["sessions"], state["running"]
        trace_records = state["trace"]
        snapshots = state.get("snapshots", snapshots)
    sessions += 1

    def snapshot() -> None:
        if snapshot_every is not None and step not in snapshots["steps"]:
            snapshots["steps"].append(step)
            snapshots["states"].append(
                {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            )

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
                "snapshots": snapshots,
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
            if snapshot_every is not None and step % snapshot_every == 0:
                snapshot()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step) * group["lr_mult"]
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
    snapshot()
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
        "context_free_bits": getattr(task, "context_free_bits", None),
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
    if snapshot_every is not None:
        _save_atomic(snapshots, out / SNAPSHOTS)
        result["snapshots"] = {"every": snapshot_every, "file": SNAPSHOTS}
    _write_json(result, result_path)
    return result

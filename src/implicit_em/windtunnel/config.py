"""What determines a wind-tunnel run: `RunConfig`, the presets of each scale, and the model.

`preset(task, scale)` gives the configuration of a task at a scale (`SCALES`); `build_model`
builds the model a configuration names: the transformer, or an MLP control whose parameter count
matches it.

Beside the architecture and the optimizer, a configuration states:

* the objective (`"ce"`, `"softmax-brier"` and the improper `"softmax-linear"`, normalized;
  `"sigmoid"`, `"brier"` and the improper `"sigmoid-linear"`, unnormalized; see `losses`);
* the learning-rate schedule (`"cosine"`: warmup, then a cosine to `min_lr_ratio * lr`;
  `"constant"`: warmup, then `lr`; `"wsd"`: warmup, `lr` held, then a linear decay to zero
  over the last `decay_fraction` of the steps; see `optim`);
* the plateau rule (`evaluation.plateau`): `steps` is a cap, and with `stop_at_plateau`
  the run ends at the first evaluation where the held-out KL improved by less than `plateau_tol`
  (relative; or by less than `plateau_atol` bits, or than `plateau_floor_tol` times the
  uniform prediction's KL) over the last `plateau_window` of the steps done, once
  `min_steps` are done; under `"wsd"` that evaluation ends the stable phase instead, and the
  run ends after its decay (`decay_end`);
* an intervention (`freeze`, `freeze_at`): from step `freeze_at` on, the `"routing"`
  parameters (the attention's query and key projections) or the `"rest"` (every other
  parameter: values, output projections, MLPs, embeddings, norms, head) stop training.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from implicit_em.windtunnel.losses import OBJECTIVES
from implicit_em.windtunnel.models import (
    GPT,
    NORMS,
    GPTConfig,
    PositionMLP,
    PrefixMLP,
    matched_mlp,
    matched_position_mlp,
)
from implicit_em.windtunnel.tasks import Task, make_task

__all__ = [
    "MODELS",
    "OBJECTIVES",
    "SCALES",
    "SCHEDULES",
    "RunConfig",
    "build_model",
    "preset",
]

MODELS = ("transformer", "mlp-prefix", "mlp-pos")
SCHEDULES = ("cosine", "constant", "wsd")
FREEZES = ("", "routing", "rest")
_MODEL_ALIASES = {"mlp": "mlp-prefix"}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's result (the device and thread count aside)."""

    task: str = "bijection"
    task_params: dict[str, int | bool | float | None] = field(
        default_factory=lambda: {"n_symbols": 10}
    )
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
    schedule: str = "cosine"
    min_lr_ratio: float = 0.02
    decay_fraction: float = 0.2
    warmup: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 500
    n_test: int = 2048
    ckpt_every: int = 500
    plateau_tol: float = 0.02
    plateau_atol: float = 1e-5
    plateau_floor_tol: float = 0.0
    plateau_window: float = 0.2
    min_steps: int = 0
    stop_at_plateau: bool = False
    freeze: str = ""
    freeze_at: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", _MODEL_ALIASES.get(self.model, self.model))
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS} (or 'mlp'), got {self.model!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.value_lr_mult <= 0:
            raise ValueError(f"value_lr_mult must be > 0, got {self.value_lr_mult}")
        split = self.split_qkv and self.model == "transformer"
        if self.value_lr_mult != 1.0 and not split:
            raise ValueError("value_lr_mult != 1 needs model='transformer' and split_qkv=True")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.targets not in ("sample", "posterior"):
            raise ValueError(f"targets must be 'sample' or 'posterior', got {self.targets!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not 0 < self.decay_fraction < 1:
            raise ValueError(f"decay_fraction must lie in (0, 1), got {self.decay_fraction}")
        if min(self.steps, self.batch_size, self.eval_every, self.ckpt_every, self.n_test) < 1:
            raise ValueError("steps, batch_size, eval_every, ckpt_every and n_test must be >= 1")
        if not (0 < self.plateau_window < 1 and min(self.plateau_tol, self.plateau_floor_tol) >= 0):
            raise ValueError(
                "plateau_window must lie in (0, 1), plateau_tol and plateau_floor_tol be >= 0"
            )
        if self.freeze not in FREEZES:
            raise ValueError(f"freeze must be one of {FREEZES}, got {self.freeze!r}")
        if self.freeze and not split:
            raise ValueError("freeze needs model='transformer' and split_qkv=True")
        if self.freeze_at < 0:
            raise ValueError(f"freeze_at must be >= 0, got {self.freeze_at}")

    @property
    def decay_start(self) -> int:
        """The latest step from which `"wsd"` decays, $D = S - \\operatorname{round}(fS)$ (the
        cap for the other schedules); with `stop_at_plateau` the decay starts earlier, at the
        first evaluation where the plateau rule holds."""
        if self.schedule != "wsd":
            return self.steps
        return self.steps - round(self.decay_fraction * self.steps)

    def decay_end(self, start: int) -> int:
        """Where a `"wsd"` decay that starts at `start` ends: the cap when it starts at
        `decay_start`, else after $\\operatorname{round}(f\\,\\text{start} / (1 - f))$ more steps
        (the same share $f$ of the run as at the cap)."""
        if start >= self.decay_start:
            return self.steps
        return start + round(self.decay_fraction * start / (1 - self.decay_fraction))

    def make_task(self) -> Task:
        return make_task(self.task, **self.task_params)


_SCALE_NAMES = ("quick", "default", "paper", "reference", "reference-cpu", "reference-budget")

_TASK_SIZES: dict[str, dict[str, dict[str, int | bool | float]]] = {
    "bijection": {
        "quick": {"n_symbols": 10},
        "default": {"n_symbols": 10},
        "paper": {"n_symbols": 20},
        "reference": {"n_symbols": 20, "n_pairs": 19, "replacement": False},
        "reference-cpu": {"n_symbols": 20, "n_pairs": 19, "replacement": False},
        "reference-budget": {"n_symbols": 20, "n_pairs": 19, "replacement": False},
    },
    "hmm": {
        "quick": {"n_states": 3, "n_observations": 3, "length": 12},
        "default": {"n_states": 3, "n_observations": 3, "length": 12},
        "paper": {"n_states": 5, "n_observations": 5, "length": 16},
        "reference": {
            "n_states": 5,
            "n_observations": 5,
            "length": 20,
            "levels": 100,
            "floor": 5,
            "markers": True,
        },
        "reference-budget": {
            "n_states": 5,
            "n_observations": 5,
            "length": 20,
            "levels": 100,
            "floor": 5,
            "markers": True,
        },
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
        "reference-budget": {"n_faces": 6, "length": 64},
    },
    "sticky": {scale: {"n_symbols": 8, "length": 16, "stay": 0.3} for scale in _SCALE_NAMES},
}

_TARGETS = {"bijection": "sample", "hmm": "posterior", "dice": "posterior", "sticky": "sample"}
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
_GATE = dict(
    schedule="cosine",
    min_lr_ratio=0.0,
    stop_at_plateau=False,
    plateau_tol=0.0,
    plateau_floor_tol=0.0005,
)
"""The fixed-length training rule with a convergence gate a run can miss: warmup, a cosine to
zero, the cap always trained, and `converged` only when the mean held-out KL of the last 20% of
the steps fell by less than 0.05% of the floor from the 20% before (no relative tolerance)."""

_SCALES["reference-budget"] = dict(
    _SCALES["reference-cpu"],
    steps=100_000,
    batch_size=128,
    lr=3e-4,
    warmup=2000,
    eval_every=2000,
    ckpt_every=2000,
    n_test=8192,
    **_GATE,
)

_TASK_SCALES: dict[tuple[str, str], dict[str, Any]] = {
    ("hmm", "reference"): dict(
        n_layer=9,
        n_head=8,
        n_embd=256,
        norm="layernorm",
        steps=7_850,
        batch_size=64,
        lr=3e-4,
        warmup=0,
        weight_decay=0.01,
        schedule="cosine",
        min_lr_ratio=0.0,
        eval_every=785,
        ckpt_every=785,
        n_test=1000,
    ),
    ("hmm", "reference-budget"): dict(
        n_layer=4,
        n_head=4,
        n_embd=128,
        steps=10_000,
        batch_size=64,
        lr=1e-3,
        warmup=500,
        eval_every=500,
        ckpt_every=500,
        n_test=2048,
    ),
}
"""Where a task's protocol differs from its scale's. The reference trains its HMM model
(9 layers x 256, 8 heads, LayerNorm, dropout 0.1) on 10k fixed sequences for 50 epochs at batch
64 (7,850 steps), AdamW lr 3e-4, weight decay 0.01, a cosine to zero without warmup; the
wind tunnel's models have no dropout, and draw fresh sequences (`reference` states the rest).
`reference-budget` trains a 4 x 128 model (about 0.82M parameters against the reference's 7.2M,
whose steps cost about six times as much on a CPU, some 9 CPU-hours per seed:
`benchmarks/windtunnel_reference_budget.py`)
for 10k steps at batch 64: the reference's 7,850 x 64 sequence passes, each sequence fresh, within
about 2 CPU-hours per seed."""

SCALES = tuple(_SCALES)
"""`quick` / `default`: CPU minutes; `paper`: the older GPU setting; `reference`: the
published protocol, for a GPU (bijection: 6 x 6 x 192, RMSNorm, batch 128, lr 3e-4, 2k warmup,
weight decay 0.1, clip 1, 100k steps, V = 20, L = 19, sampled answers; HMM: its own, see
`_TASK_SCALES`, 5 x 5, T = 20, 0.01 grid, minimum 0.05, [OBS] markers, exact filter as target);
`reference-cpu`: the same tasks and targets with a smaller transformer and fewer steps, for a
2-core CPU; `reference-budget`: the reference's data budget on a CPU (bijection: the
`reference-cpu` transformer, 2 x 64, for 100k steps at batch 128, lr 3e-4, 2k warmup; HMM with
markers: see `_TASK_SCALES`), trained to a fixed length under the convergence gate `_GATE`."""


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
        **{**_SCALES[scale], **_TASK_SCALES.get((task, scale), {})},
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

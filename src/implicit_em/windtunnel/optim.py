r"""The optimizer of a wind-tunnel run: AdamW, its parameter groups, and the learning rate per step.

The schedule at step $s$ (peak $\eta$, warmup $w$, cap $S$, floor ratio $\rho$):

$$
\eta_s = \eta\,\frac{s+1}{w}\quad (s < w), \qquad
\eta_s = \eta\bigl(\rho + (1-\rho)\tfrac12(1 + \cos(\pi \min(1, \tfrac{s-w}{S-w})))\bigr)
\ \text{(cosine)} \quad\text{or}\quad \eta_s = \eta\ \text{(constant)},
$$

or, warmup-stable-decay (`"wsd"`, decay from $D = S - \operatorname{round}(f S)$ with $f$ =
`decay_fraction`): $\eta_s = \eta$ for $w \le s < D$ and $\eta_s = \eta\,(E - s)/(E - D)$ for
$s \ge D$, a linear decay to zero at $E = S$. The plateau rule of a `"wsd"` run is read at $D$,
before the decay (see `train`). With `stop_at_plateau`, $D$ is the first evaluation where the
plateau rule holds (at most $S - \operatorname{round}(fS)$) and $E = D +
\operatorname{round}(fD/(1-f))$ (`RunConfig.decay_end`): the decay is the same share of the run.

A split transformer (`split_qkv`) has three groups, one per part: `"routing"` (the query and
key projections), `"values"` (the value projections) and `"rest"`; any other model has one
group, `"all"`. The values train at `value_lr_mult` times the rate. AdamW's decay,
$\theta \leftarrow \theta - \eta_g \lambda_g \theta$, scales with the group's rate $\eta_g$; the
values' $\lambda_g = \lambda / \text{value\_lr\_mult}$ keeps their decay per step at
$\eta_s\lambda$, the same as every other parameter's: the multiplier speeds the gradient
step only. A frozen part (`freeze`, from step `freeze_at`) gets $\eta_g = 0$: AdamW then moves
it neither by its gradient nor by decay.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from implicit_em.windtunnel.config import RunConfig

__all__ = [
    "PARTS",
    "group_rate",
    "learning_rate",
    "make_optimizer",
    "part_of",
    "set_learning_rates",
]

PARTS = ("routing", "values", "rest")
_FROZEN = {"routing": ("routing",), "rest": ("values", "rest")}


def part_of(name: str) -> str:
    """The part of a split transformer that the parameter called `name` belongs to."""
    if ".attn.query." in name or ".attn.key." in name:
        return "routing"
    if ".attn.value." in name:
        return "values"
    return "rest"


def learning_rate(config: RunConfig, step: int, decay_from: int | None = None) -> float:
    """The base learning rate at `step` (see the module); `decay_from`: where a `"wsd"` run's
    plateau started its decay (None: `config.decay_start`)."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "wsd":
        start = config.decay_start if decay_from is None else decay_from
        if step < start:
            return config.lr
        end = config.decay_end(start)
        return config.lr * max(0, end - step) / max(1, end - start)
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)


def _groups(model: nn.Module, config: RunConfig) -> list[dict[str, Any]]:
    if not (config.split_qkv and config.model == "transformer"):
        return [
            {
                "params": list(model.parameters()),
                "part": "all",
                "lr_mult": 1.0,
                "weight_decay": config.weight_decay,
            }
        ]
    named = list(model.named_parameters())
    groups = []
    for part in PARTS:
        mult = config.value_lr_mult if part == "values" else 1.0
        groups.append(
            {
                "params": [p for n, p in named if part_of(n) == part],
                "part": part,
                "lr_mult": mult,
                "weight_decay": config.weight_decay / mult,
            }
        )
    return groups


def make_optimizer(model: nn.Module, config: RunConfig) -> torch.optim.AdamW:
    """AdamW (betas 0.9, 0.95) over the parameter groups of `model` (see the module)."""
    return torch.optim.AdamW(
        _groups(model, config), lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.95)
    )


def group_rate(
    config: RunConfig, part: str, lr_mult: float, step: int, decay_from: int | None = None
) -> float:
    """The rate of the group of `part` (multiplier `lr_mult`) at `step`: the schedule times the
    multiplier, 0 when the part is frozen."""
    frozen = _FROZEN.get(config.freeze, ()) if step >= config.freeze_at else ()
    return 0.0 if part in frozen else learning_rate(config, step, decay_from) * lr_mult


def set_learning_rates(
    optimizer: torch.optim.Optimizer, config: RunConfig, step: int, decay_from: int | None = None
) -> None:
    """Give each group its rate for `step` (`group_rate`)."""
    for group in optimizer.param_groups:
        group["lr"] = group_rate(config, group["part"], group["lr_mult"], step, decay_from)

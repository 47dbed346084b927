r"""Two timescales (claim C12): how long the attention and the values take to reach their end state.

From weight snapshots taken during training (`run(..., snapshot_every=n)`) and a fixed probe
batch, at every snapshot step $t$ of a run that ends at $T$:

$$
\text{attention drift}(t) = \operatorname{mean}_{\ell, b, h, i}\ \tfrac12 \sum_j
\bigl|\alpha^{(\ell)}_{bhij}(t) - \alpha^{(\ell)}_{bhij}(T)\bigr|
\qquad\text{(total variation of each query's attention row)},
$$

$$
\text{value drift}(t) = \frac{\lVert W_V(t) - W_V(T) \rVert_F}{\lVert W_V(T) \rVert_F}
\qquad\text{(value projections of all layers stacked)}.
$$

These two drifts are in different units. `remaining_distance` puts every part of a split
transformer (`optim.PARTS`: routing = query and key projections, values, the rest) in one
unit, the fraction of its net displacement still ahead of it:

$$
\rho_P(t) = \frac{\lVert \theta_P(t) - \theta_P(T) \rVert}{\lVert \theta_P(0) - \theta_P(T) \rVert},
$$

so that $\rho_P(0) = 1$ and $\rho_P(T) = 0$ for every part $P$.

`settling_step` is the first snapshot step from which a series stays below a threshold
until the end: with $\rho_P$ and 0.1, $t_{90}(P)$, the step from which part $P$ stays within
10% of its net displacement of its final value. The E-step/M-step picture of C12 predicts that
the routing settles first: $t_{90}(\text{routing}) < t_{90}(\text{values})$. Measured under a
constant learning rate, so that no decay of the schedule makes everything settle at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.optim import PARTS, part_of

__all__ = [
    "Drift",
    "attention_maps",
    "drift_to_final",
    "remaining_distance",
    "settling_step",
    "value_weights",
]


@dataclass(frozen=True)
class Drift:
    """Drifts to the final state at each snapshot step (`steps` ascending, the last is `T`)."""

    steps: list[int]
    attention: list[float]
    value: list[float]


@torch.no_grad()
def attention_maps(model: nn.Module, probe: Tensor) -> list[Tensor]:
    """The attention weights `alpha[B, H, T, T]` of every layer of an eager GPT on `probe`."""
    model.eval()
    model(probe)
    maps = [block.attn.last_alpha for block in model.blocks]
    if any(a is None for a in maps):
        raise ValueError("attention_maps needs a GPT with eager attention (sdpa=False)")
    return [a.double() for a in maps]


def value_weights(state: dict[str, Tensor]) -> Tensor:
    """The value projections $W_V$ of every layer of a GPT state dict, stacked by rows."""
    parts = []
    for name in sorted(state):
        if name.endswith("attn.value.weight"):
            parts.append(state[name])
        elif name.endswith("attn.qkv.weight"):
            parts.append(state[name].chunk(3, dim=0)[2])
    if not parts:
        raise ValueError("no attention value projection in this state dict")
    return torch.cat(parts).double()


def drift_to_final(config: RunConfig, snapshots: dict[str, Sequence[Any]], probe: Tensor) -> Drift:
    """Attention and value drift of each snapshot relative to the last one (see the module)."""
    if config.model != "transformer":
        raise ValueError("drift_to_final reads attention: it needs model='transformer'")
    steps, states = list(snapshots["steps"]), list(snapshots["states"])
    if len(steps) < 2:
        raise ValueError("drift_to_final needs at least two snapshots")
    model = build_model(replace(config, sdpa=False), config.make_task())
    model.load_state_dict(states[-1])
    final_alpha = attention_maps(model, probe)
    final_v = value_weights(states[-1])
    attention, value = [], []
    for state in states:
        model.load_state_dict(state)
        alpha = attention_maps(model, probe)
        tv = [
            0.5 * (a - f).abs().sum(dim=-1).mean() for a, f in zip(alpha, final_alpha, strict=True)
        ]
        attention.append(float(torch.stack(tv).mean()))
        value.append(float((value_weights(state) - final_v).norm() / final_v.norm()))
    return Drift(steps, attention, value)


def settling_step(steps: Sequence[int], drift: Sequence[float], threshold: float = 0.05) -> int:
    """The first step from which `drift` stays below `threshold` through the last step."""
    if len(steps) != len(drift) or not steps:
        raise ValueError("steps and drift must be non-empty and of the same length")
    settled = steps[-1]
    for step, value in zip(reversed(steps), reversed(drift), strict=True):
        if value >= threshold:
            break
        settled = step
    return settled


def _flat_parts(state: dict[str, Tensor]) -> dict[str, Tensor]:
    parts = {part: [] for part in PARTS}
    for name in sorted(state):
        parts[part_of(name)].append(state[name].double().flatten())
    return {part: torch.cat(p) for part, p in parts.items() if p}


def remaining_distance(snapshots: dict[str, Sequence[Any]]) -> dict[str, list[float]]:
    r"""$\rho_P(t)$ of every part $P$ at every snapshot (see the module), by part name.

    A part that did not move at all ($\theta_P(0) = \theta_P(T)$) has $\rho_P = 0$ throughout.
    """
    states = list(snapshots["states"])
    if len(states) < 2:
        raise ValueError("remaining_distance needs at least two snapshots")
    flat = [_flat_parts(state) for state in states]
    last = flat[-1]
    if set(last) != set(PARTS):
        raise ValueError("remaining_distance needs a split transformer (split_qkv=True)")
    out: dict[str, list[float]] = {}
    for part in PARTS:
        net = float((flat[0][part] - last[part]).norm())
        out[part] = [float((f[part] - last[part]).norm()) / net if net > 0 else 0.0 for f in flat]
    return out

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

`settling_step` is the first snapshot step from which a drift stays below a threshold
(5% in the report) until the end: $t_\alpha$ for the attention, $t_V$ for the values.
The E-step/M-step picture of C12 predicts $t_\alpha \ll t_V$.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.windtunnel.train import RunConfig, build_model

__all__ = ["Drift", "attention_maps", "drift_to_final", "settling_step", "value_weights"]


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

r"""E12's one-part freeze and timescales on the one-head lag arm (`_lag_head`), claim C12.

One plain-SGD run per seed keeps its weights at each freeze step $t$. From each, two branches
train to the same end $T$ with ONE part frozen and everything else training: the routing
($W_Q, W_K$) alone, or the values ($W_V$) alone (the readout $W_O$ trains in both). Freezing a
part that has settled costs nothing. With $K_P(t)$ the final held-out KL of the branch with
part $P$ frozen from $t$ and $F$ the floor,

$$
g(t) = \frac{K_\text{values}(t) - K_\text{routing}(t)}{F} > 0
$$

says that the routing had settled before the values had (C12: "attention patterns stabilize
early while value vectors keep refining"); $g(t) < 0$ the reverse.

The same run gives the timescales (`_lag_head.settled_from`, 10% of the net change): of the
attention's mean row entropy, of the held-out KL, and of each part's weights, read on their
remaining distance $\rho_P(t) = \lVert\theta_P(t) - \theta_P(T)\rVert /
\lVert\theta_P(0) - \theta_P(T)\rVert$. As shares of the run,

$$
\text{attention lead} = \frac{t_\text{KL} - t_\text{entropy}}{T}, \qquad
\text{values lag} = \frac{t_{W_V} - t_{W_Q,W_K}}{T},
$$

both positive when the attention settles first and the values keep refining. A third run keeps
the routing at its initialization throughout: its excess KL over the full run is what routing
is worth on the task (C12 says nothing where it is worth nothing).

The known-answer controls train the same head on the same data with the timescales set by the
rates: the routing at `control_mult` times the rate of every other part (its attention settles
first), or the values at `control_mult` times the rate (the values settle first: the same
network without the routing's head start).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from implicit_em.report.experiments import _lag_head as lag_head
from implicit_em.windtunnel.one_head import PARTS

FROZEN = ("routing", "values")


def remaining(snapshots: Mapping[int, Mapping[str, torch.Tensor]], part: str) -> list[float]:
    """$\\rho_P(t)$ at every snapshot step, in step order (see the module)."""
    steps = sorted(snapshots)

    def flat(step: int) -> torch.Tensor:
        return torch.cat([snapshots[step][name].flatten() for name in PARTS[part]])

    end = flat(steps[-1])
    total = float((flat(steps[0]) - end).norm())
    return [float((flat(s) - end).norm()) / total if total > 0 else 0.0 for s in steps]


def freeze_unit(
    config: Mapping[str, Any], seed: int, mults: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """One seed: the full run at rates `mults` (None: plain SGD), its one-part branches at every
    freeze step, the gaps $g(t)$ and the timescales (see the module)."""
    lag = config["e12"]["lag"]
    freeze_at = list(lag["freeze_at"])
    full = lag_head.run(lag, seed, mults, states_at=freeze_at, snapshot_every=lag["snapshot_every"])
    floor = lag_head.floor_bits(lag, seed)
    steps, kl = lag_head.curve(full)
    _, entropy = lag_head.curve(full, "attention_entropy_bits")
    frozen = {
        part: [
            lag_head.curve(
                lag_head.run(lag, seed, mults, weights=full.states[t], start=t, freeze=part)
            )[1][-1]
            for t in freeze_at
        ]
        for part in FROZEN
    }
    at_init = lag_head.run(lag, seed, mults, freeze="routing")
    snap_steps = sorted(full.snapshots)
    settled = {
        part: lag_head.settled_from(snap_steps, remaining(full.snapshots, part))
        for part in ("routing", "values")
    }
    t_kl, t_entropy = lag_head.settled_from(steps, kl), lag_head.settled_from(steps, entropy)
    total = lag["steps"]
    return {
        "freeze_at": freeze_at,
        "floor_bits": floor,
        "kl_initial": kl[0],
        "kl_full": kl[-1],
        **{f"kl_{part}_frozen": frozen[part] for part in FROZEN},
        "kl_routing_at_init": lag_head.curve(at_init)[1][-1],
        "gap": [(v - r) / floor for r, v in zip(frozen["routing"], frozen["values"], strict=True)],
        "t_kl": t_kl,
        "t_entropy": t_entropy,
        "t_weights": settled,
        "attention_lead": (t_kl - t_entropy) / total,
        "values_lag": (settled["values"] - settled["routing"]) / total,
        "curves": {"steps": steps, "kl_bits": kl, "entropy_bits": entropy},
    }

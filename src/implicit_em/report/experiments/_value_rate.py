r"""E12's value-rate test: does a 10x step on the values converge faster, on a task that needs
attention (`_lag_head`)?

Per seed two runs start from the same weights: plain SGD (every part at rate $\eta$), and the
values ($W_V$) at $m\eta$ ($m$ = `value_lr_mult`). With $K_0$ the held-out KL at step 0 and
$K_T^a$ arm $a$'s final KL, both arms are timed to the same level, 90% of the way down to the
worse final,

$$
K^\star = K_0 - (1 - \epsilon)\bigl(K_0 - \max_a K_T^a\bigr), \qquad
t_a = \min\{t : K^a_t \le K^\star\}, \qquad
g = \log_2 \frac{t_\text{plain}}{t_\text{fast}},
$$

$\epsilon$ = `SETTLED` (0.1): $t_a$ is always reached, no warmup or schedule is involved and a
10x rate is a 10x step. If the values are the slow part (C12: "value vectors keep refining"),
$g > 0$; if the routing is, a faster value rate buys nothing.

The known-answer controls plant which part has to learn, from the plain arm's end state
$\theta_T$ on the same seed: the routing ($W_Q, W_K$) planted at its end and the rest at
initialization (values the bottleneck: a faster value rate must help), or the values and readout
($W_V, W_O$) planted at their end and the routing at initialization (the routing the
bottleneck).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from implicit_em.report.experiments import _lag_head as lag_head
from implicit_em.windtunnel.one_head import PARTS

PLANTS = ("routing", "values")
"""What a control plants at its end state: the routing (values the bottleneck) or the values
and readout (the routing the bottleneck)."""


def time_to(steps: list[int], kl: list[float], level: float) -> int:
    """The first evaluation step at which the KL is at or below `level`."""
    return next(s for s, k in zip(steps, kl, strict=True) if k <= level)


def timed(plain: list[float], fast: list[float], steps: list[int]) -> dict[str, float]:
    """Both arms' times to $K^\\star$ and the log-ratio $g$ (see the module), from their KL
    curves read at the same `steps`."""
    k0 = plain[0]
    level = k0 - (1.0 - lag_head.SETTLED) * (k0 - max(plain[-1], fast[-1]))
    t_plain, t_fast = time_to(steps, plain, level), time_to(steps, fast, level)
    return {
        "level_bits": level,
        "t_plain": float(t_plain),
        "t_fast": float(t_fast),
        "speedup_log2": math.log2(max(t_plain, 1) / max(t_fast, 1)),
        "kl_plain": plain[-1],
        "kl_fast": fast[-1],
        "kl_initial": k0,
    }


def planted(lag: Mapping[str, Any], seed: int, part: str) -> dict[str, Tensor]:
    """The initial weights with `part` ("routing": $W_Q, W_K$; "values": $W_V, W_O$) set to the
    plain arm's end state on the same seed."""
    initial = lag_head.model(lag, seed).state_dict()
    trained = lag_head.run(lag, seed, snapshot_every=lag["steps"]).snapshots[lag["steps"]]
    names = PARTS["routing"] if part == "routing" else PARTS["values"] + PARTS["readout"]
    return {k: (trained[k] if k in names else v) for k, v in initial.items()}


def value_rate_unit(config: Mapping[str, Any], seed: int, plant: str = "") -> dict[str, Any]:
    """One seed's two arms (from `planted` weights when `plant` names a part)."""
    lag = config["e12"]["lag"]
    weights = planted(lag, seed, plant) if plant else None
    arms = {
        arm: lag_head.curve(lag_head.run(lag, seed, mults, weights=weights))
        for arm, mults in (("plain", None), ("fast", {"values": float(lag["value_lr_mult"])}))
    }
    steps = arms["plain"][0]
    return {
        **timed(arms["plain"][1], arms["fast"][1], steps),
        "floor_bits": lag_head.floor_bits(lag, seed),
        "curves": {"steps": steps, **{arm: kl for arm, (_, kl) in arms.items()}},
    }

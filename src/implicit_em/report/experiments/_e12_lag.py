r"""E12's one-head lag arm as the report reads it: per-seed samples, tables and known-answer
controls of the one-part freeze (`_one_part_freeze`) and the value-rate test (`_value_rate`).

Criteria (one value per seed; the weights' own timescales, $(t_{W_V} - t_{W_Q,W_K}) / T$, are
reported as `lag_values_lag` and judged by nothing: under a 10x routing rate the query and key
weights keep growing after the attention has formed, so the weights' settling does not tell
which part learned first):

* `lag_gap_mid`: $g(t)$ at the middle freeze step (`POINTS`; the early and late steps are
  reported: at the control size their controls do not both come out as planted);
* `lag_attention_lead`: $(t_\text{KL} - t_\text{entropy}) / T$;
* `value_rate_speedup_log2`: $\log_2(t_\text{plain} / t_\text{fast})$.

The controls run the same units at the protocol's `control` size: the freeze and timescale
criteria with the routing at `control_mult` times the rate of the rest (positive) or the values
at `control_mult` times it (negative, the same network without the routing's head start); the
value-rate criterion from weights with the routing planted at its end (positive: the values are
the bottleneck) or the values and readout planted (negative: the routing is).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.experiments._one_part_freeze import freeze_unit
from implicit_em.report.experiments._value_rate import value_rate_unit
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.registry import Figure, Table

POINTS = ("early", "mid", "late")
"""The names of the lag arm's three freeze steps, in order (`e12.lag.freeze_at`)."""


def samples(freeze: Mapping[int, Any], rate: Mapping[int, Any]) -> dict[str, list[float]]:
    """The per-seed values of the lag arm's criteria (see the module)."""
    out = {"lag_gap_mid": wt.per_seed(freeze, lambda u: u["gap"][POINTS.index("mid")])}
    out["lag_attention_lead"] = wt.per_seed(freeze, lambda u: u["attention_lead"])
    out["value_rate_speedup_log2"] = wt.per_seed(rate, lambda u: u["speedup_log2"])
    return out


def numbers(freeze: Mapping[int, Any], rate: Mapping[int, Any]) -> dict[str, float]:
    """Gates and headline numbers: the plain runs' smallest KL gain (share of the initial KL),
    the mean final KL, and the mean settling steps."""

    def mean(units: Mapping[int, Any], read: Any) -> float:
        return float(np.mean(wt.per_seed(dict(units), read)))

    return {
        "lag_kl_gain_min": min(
            (u["kl_initial"] - u["kl_full"]) / u["kl_initial"] for u in freeze.values()
        ),
        "lag_routing_init_cost_bits": mean(
            freeze, lambda u: u["kl_routing_at_init"] - u["kl_full"]
        ),
        "lag_final_kl": mean(freeze, lambda u: u["kl_full"]),
        **{
            f"lag_gap_{name}": mean(freeze, lambda u, i=i: u["gap"][i])
            for i, name in enumerate(POINTS)
        },
        "lag_floor_bits": mean(freeze, lambda u: u["floor_bits"]),
        "lag_t_kl": mean(freeze, lambda u: u["t_kl"]),
        "lag_t_entropy": mean(freeze, lambda u: u["t_entropy"]),
        **{
            f"lag_t_{part}_weights": mean(freeze, lambda u, p=part: u["t_weights"][p])
            for part in ("routing", "values")
        },
        "lag_values_lag": mean(freeze, lambda u: u["values_lag"]),
        "value_rate_t_plain": mean(rate, lambda u: u["t_plain"]),
        "value_rate_t_fast": mean(rate, lambda u: u["t_fast"]),
    }


def tables(config: Mapping[str, Any], freeze: Mapping[int, Any], rate: Mapping[int, Any]) -> list:
    """The freeze table, the timescale table and the value-rate table of the lag arm."""
    lag = config["e12"]["lag"]
    seeds = list(config["seeds"])
    units = dict(freeze)

    def excess(part: str, i: int) -> str:
        return wt.interval_text(
            wt.per_seed(units, lambda u: u[f"kl_{part}_frozen"][i] - u["kl_full"])
        )

    freeze_rows = tuple(
        (
            f"{POINTS[i]} (t = {t})",
            excess("routing", i),
            excess("values", i),
            wt.interval_text(wt.per_seed(units, lambda u, i=i: u["gap"][i])),
        )
        for i, t in enumerate(lag["freeze_at"])
    )
    timescales = {
        "attention entropy": lambda u: u["t_entropy"],
        "held-out KL": lambda u: u["t_kl"],
        "routing weights (W_Q, W_K)": lambda u: u["t_weights"]["routing"],
        "value weights (W_V)": lambda u: u["t_weights"]["values"],
    }
    rate_units = dict(rate)
    return [
        Table(
            "One head on the lag task (the answer needs the token one back; plain SGD, "
            f"{lag['steps']} steps): ONE part frozen from step t, everything else training to "
            "the end. Excess held-out KL over the full run (bits) and the gap "
            "(K_values − K_routing) / floor (criterion; > 0: the routing settled first), mean "
            f"and 95% t interval over seeds {seeds}",
            ("freeze step", "routing (W_Q, W_K) frozen", "values (W_V) frozen", "gap / floor"),
            freeze_rows,
        ),
        Table(
            "One head on the lag task: the step from which each series stays within 10% of its "
            "net change (mean and 95% t interval)",
            ("series", "settled from step"),
            tuple(
                (name, wt.interval_text(wt.per_seed(units, read)))
                for name, read in timescales.items()
            ),
        ),
        Table(
            f"One head on the lag task: plain SGD against the values at {lag['value_lr_mult']:g}x "
            "the rate, each timed to 90% of the way from the initial held-out KL to the worse "
            "arm's final (steps; mean and 95% t interval)",
            ("arm", "steps", "final KL (bits)"),
            (
                (
                    "plain",
                    wt.interval_text(wt.per_seed(rate_units, lambda u: u["t_plain"])),
                    wt.interval_text(wt.per_seed(rate_units, lambda u: u["kl_plain"])),
                ),
                (
                    f"values at {lag['value_lr_mult']:g}x",
                    wt.interval_text(wt.per_seed(rate_units, lambda u: u["t_fast"])),
                    wt.interval_text(wt.per_seed(rate_units, lambda u: u["kl_fast"])),
                ),
                (
                    "log2 speed-up (criterion)",
                    wt.interval_text(wt.per_seed(rate_units, lambda u: u["speedup_log2"])),
                    "",
                ),
            ),
        ),
    ]


@cache
def _at_rates(lag_json: str, seed: int, part: str) -> dict[str, Any]:
    """`freeze_unit` with `part` at `control_mult` times the rate (kept: every freeze and
    timescale criterion reads the same control runs)."""
    lag = json.loads(lag_json)
    return freeze_unit({"e12": {"lag": lag}}, seed, {part: float(lag["control_mult"])})


def _freeze_control(read: Any, part: str, says: str) -> Control:
    def measure(config: Mapping[str, Any]) -> list[float]:
        lag_json = json.dumps(config["e12"]["lag"], sort_keys=True)
        return [read(_at_rates(lag_json, s, part)) for s in config["seeds"]]

    return Control(says, measure)


def _freeze_controls(read: Any) -> Controls:
    return Controls(
        _freeze_control(
            read, "routing", "the routing at 10x the rate of the rest: it settles first"
        ),
        _freeze_control(
            read, "values", "the values at 10x the rate of the rest: they settle first"
        ),
    )


def _rate_control(plant: str, says: str) -> Control:
    return Control(
        says,
        lambda config: [value_rate_unit(config, s, plant)["speedup_log2"] for s in config["seeds"]],
    )


CONTROLS = {
    "lag_gap_mid": _freeze_controls(lambda u: u["gap"][POINTS.index("mid")]),
    "lag_attention_lead": _freeze_controls(lambda u: u["attention_lead"]),
    "value_rate_speedup_log2": Controls(
        _rate_control("routing", "the routing planted at its trained end: the values must learn"),
        _rate_control(
            "values", "the values and readout planted at their trained end: the routing must learn"
        ),
    ),
}
"""The known-answer controls of the lag arm's criteria (see the module)."""


def figure(freeze: Mapping[int, Any], rate: Mapping[int, Any], out: Path) -> Figure:
    """The first seed's lag head: its held-out KL and attention entropy under plain SGD, and
    the plain and 10x-values arms' KL."""
    fig, axes = new_figure(ncols=2, width=5.0, height=3.6)
    first = freeze[min(freeze)]["curves"]
    ax = axes[0, 0]
    ax.plot(first["steps"], first["kl_bits"], label="held-out KL (bits)")
    ax.plot(first["steps"], first["entropy_bits"], label="attention entropy (bits)")
    ax.set_xlabel("step (plain SGD)")
    ax.set_title("one head on the lag task (first seed)")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    curves = rate[min(rate)]["curves"]
    for arm, label in (("plain", "plain SGD"), ("fast", "values at 10x")):
        ax.plot(curves["steps"], curves[arm], label=label)
    ax.set_xlabel("step")
    ax.set_title("held-out KL (bits), first seed")
    ax.legend(fontsize=7)
    return Figure(
        save(fig, out, "lag_head.png"),
        "Left: the lag head's held-out KL and attention entropy under plain SGD (first seed). "
        "Right: plain SGD against the values at 10x the rate (first seed).",
    )

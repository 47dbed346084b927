r"""E12's reference arm: the follow-up paper's two-timescale experiment on a sticky Markov chain.

The reference trains a transformer on a sticky Markov chain over 8 symbols (self-transition
0.3; `implicit_em.windtunnel.tasks.StickyMarkov`, whose exact next-token posterior is the
transition row of the last symbol) and reports that giving the value projections 10x the
routing's learning rate converges 2.3x faster (430 against 1,000 steps, 5 seeds). Here E12's
transformer (split projections, constant rate after warmup) trains on the same task twice per
seed, with the values at 1x and at `value_lr_mult` x the rate (`optim.PARTS`), and each run's
steps to converge are read: the first evaluation at which its held-out KL to the exact
posterior is at or below `converge_bits` (bits per position). Reported beside the reference's
numbers; no criterion reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.windtunnel.config import RunConfig, preset

REFERENCE = {"value_lr_mult": 10.0, "steps_base": 1000, "steps_fast_values": 430, "seeds": 5}
"""The reference's published numbers (steps to converge, mean over its seeds)."""
ARMS = ("base", "fast_values")


def sticky_runs(config: dict[str, Any], seed: int) -> list[RunConfig]:
    """The two runs of a seed: values at 1x the rate (`base`) and at `value_lr_mult` x."""
    sticky = config["e12"]["sticky"]
    fields = {
        **config["train"],
        "model": "transformer",
        "split_qkv": True,
        "schedule": "constant",
        "stop_at_plateau": False,
        "min_steps": 0,
        "steps": sticky["steps"],
        "eval_every": sticky["eval_every"],
        "ckpt_every": sticky["steps"],
        "seed": seed,
    }
    return [
        preset("sticky", config["scale"], **fields, value_lr_mult=mult)
        for mult in (1.0, float(sticky["value_lr_mult"]))
    ]


def steps_to_converge(steps: Sequence[int], kl: Sequence[float], converge_bits: float) -> float:
    """The first evaluation step whose held-out KL is at or below `converge_bits`; NaN when
    none is."""
    return float(next((s for s, k in zip(steps, kl, strict=True) if k <= converge_bits), math.nan))


def sticky_unit(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """One seed's two runs: each arm's steps to converge, final KL and floor."""
    converge = config["e12"]["sticky"]["converge_bits"]
    with wt.unit_folder() as out, wt.pool(config) as workers:
        runs = wt.run_results(config, out, sticky_runs(config, seed), workers)
    return {
        arm: {
            "steps_to_converge": steps_to_converge(
                r["history"]["eval_step"], r["history"]["eval_kl"], converge
            ),
            "kl_bits": r["kl_bits"],
            "uniform_kl_bits": r["uniform_kl_bits"],
        }
        for arm, r in zip(ARMS, runs, strict=True)
    }


def sticky_summary(config: dict[str, Any], units: Mapping[int, Mapping[str, Any]]) -> dict:
    """Means over seeds: each arm's steps to converge (over the seeds that converged), how
    many converged, final KL, and the speed-up base / fast values (NaN unless both arms
    converged on some seed)."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        steps = [u[arm]["steps_to_converge"] for u in units.values()]
        done = [s for s in steps if math.isfinite(s)]
        out[f"sticky_{arm}_steps"] = sum(done) / len(done) if done else math.nan
        out[f"sticky_{arm}_converged"] = len(done)
        out[f"sticky_{arm}_kl_bits"] = sum(u[arm]["kl_bits"] for u in units.values()) / len(units)
    base, fast = out["sticky_base_steps"], out["sticky_fast_values_steps"]
    out["sticky_speedup"] = base / fast if math.isfinite(base) and fast > 0 else math.nan
    return out


def sticky_rows(config: dict[str, Any], summary: Mapping[str, Any], n_seeds: int) -> tuple:
    """The table rows: the reference's numbers and ours, arm by arm."""
    sticky = config["e12"]["sticky"]
    mult = f"{sticky['value_lr_mult']:g}x"

    def ours(arm: str) -> str:
        steps = summary[f"sticky_{arm}_steps"]
        shown = f"{steps:.0f}" if math.isfinite(steps) else "not reached"
        return f"{shown} ({summary[f'sticky_{arm}_converged']}/{n_seeds} reached)"

    speed = summary["sticky_speedup"]
    return (
        ("values at 1x", str(REFERENCE["steps_base"]), ours("base")),
        (f"values at {mult}", str(REFERENCE["steps_fast_values"]), ours("fast_values")),
        (
            "speed-up",
            f"{REFERENCE['steps_base'] / REFERENCE['steps_fast_values']:.1f}x",
            f"{speed:.2f}x" if math.isfinite(speed) else "n/a",
        ),
        ("converged at", "(its own rule)", f"KL ≤ {sticky['converge_bits']:g} bits"),
    )

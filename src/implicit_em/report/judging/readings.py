r"""Readings: a criterion's intervals, one per data set, and how they combine into its status.

A criterion reads its per-seed values from an outcome's `samples`: one list under its `number`,
or, when it declares `combine`, one list per data set under `<number>@<data set>` (seeds of
different data sets are never pooled into one interval). Each list gives one `Reading`:

* `met`, `not met` or `undecided`: the interval is wholly on the right side of the threshold,
  wholly on the wrong side, or across it (also with too few seeds or a NaN);
* `degenerate`: the interval has zero width (every seed gave the same value). A constant is not
  a spread over seeds: the reading is a **gate**, passed when the constant is on the right side
  of the threshold, and casts no vote on its item. The experiment's verdict counts a criterion
  whose every reading is degenerate as met when all pass, not met when one fails.

`combine = "all"` (the statement holds on every data set) reads the non-degenerate readings as
a conjunction: `met` when every one is met, `not met` when any one is not met (the statement
fails on that data set), `undecided` otherwise; `degenerate` when every reading is. A degenerate
reading beside measured ones enters the conjunction as its gate: left out when it passes, `not
met` when it fails (every seed of that data set is on the wrong side).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from implicit_em.report.judging.stats import METHOD_NAMES, Interval, modes

__all__ = [
    "COMBINE_RULES",
    "DEGENERATE",
    "Reading",
    "combined_status",
    "decisive",
    "declared_modes",
    "format_number",
    "measured_text",
    "per_data_set",
]

COMBINE_RULES = ("", "all")
"""How per-data-set readings combine: "" (one list, no data sets) or "all" (every data set)."""

DEGENERATE = "degenerate"


def format_number(value: float | None) -> str:
    """A number as the rules and reasons print it (4 significant digits, or scientific)."""
    if value is None:
        return "n/a"
    if not math.isfinite(value):
        return str(value)
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"


@dataclass(frozen=True)
class Reading:
    """One interval of a criterion, over one data set's seeds (`label`) or over all of its seeds
    (`label` ""), with its status and the per-seed `values` it was read from; `passed` says
    whether a degenerate reading passes as a gate (None for the others)."""

    label: str
    interval: Interval
    status: str
    values: tuple[float, ...] = ()
    passed: bool | None = None

    @property
    def where(self) -> str:
        return f" on {self.label}" if self.label else ""

    def show(self) -> str:
        i = self.interval
        if self.status == DEGENERATE:
            gate = "passes" if self.passed else "FAILS"
            return (
                f"degenerate{self.where} (all seeds equal {format_number(i.estimate)}, n = {i.n}):"
                f" a gate, {gate}"
            )
        return (
            f"{format_number(i.estimate)} [{format_number(i.low)}, {format_number(i.high)}]"
            f"{self.where} ({METHOD_NAMES[i.method]}, n = {i.n})"
        )

    def as_dict(self) -> dict[str, Any]:
        i = self.interval
        return {
            "data_set": self.label,
            "estimate": i.estimate,
            "low": i.low,
            "high": i.high,
            "method": i.method,
            "seeds": i.n,
            "status": self.status,
            "gate_passed": self.passed,
        }


def combined_status(readings: Sequence[Reading], rule: str) -> str:
    """The status of a criterion from its `readings` under `rule` (see the module)."""
    if rule not in COMBINE_RULES:
        raise ValueError(f"combine must be one of {COMBINE_RULES}, got {rule!r}")
    voting = [r.status for r in readings if r.status != DEGENERATE]
    if not voting:
        return DEGENERATE
    if any(r.status == DEGENERATE and not r.passed for r in readings):
        return "not met"
    if "not met" in voting:
        return "not met"
    return "met" if all(s == "met" for s in voting) else "undecided"


def decisive(readings: Sequence[Reading], status: str, upward: bool) -> Reading:
    """The reading that decides a combined `status`: of those with that status, the one whose
    far end lies furthest toward the threshold's wrong side (below it when the criterion needs
    a value above the threshold, `upward`)."""
    pool = [r for r in readings if r.status == status] or list(readings)
    return min(pool, key=lambda r: r.interval.low if upward else -r.interval.high)


def declared_modes(readings: Sequence[Reading], gap: float | None) -> list[dict[str, Any]]:
    """Each reading's modes at the declared `gap` (`stats.modes`), for the readings whose
    values fall in more than one mode: `{"data_set", "modes": [{count, mean, low, high}]}`."""
    if gap is None:
        return []
    found = [(r.label, modes(r.values, gap)) for r in readings]
    return [
        {"data_set": label, "modes": [vars(m) for m in ms]} for label, ms in found if len(ms) > 1
    ]


def per_data_set(
    samples: Mapping[str, Sequence[float]], data_sets: Sequence[str]
) -> dict[str, list[float]]:
    """Per-unit `samples` split by data set: `data_sets[i]` names the data set of every list's
    i-th value, and each list becomes one list per data set, keyed `<quantity>@<data set>`."""
    out: dict[str, list[float]] = {}
    for quantity, values in samples.items():
        if len(values) != len(data_sets):
            raise ValueError(f"{quantity}: {len(values)} values for {len(data_sets)} data sets")
        for value, name in zip(values, data_sets, strict=True):
            out.setdefault(f"{quantity}@{name}", []).append(float(value))
    return out


def _reading_text(r: Mapping[str, Any], modes_found: Sequence[Mapping[str, Any]]) -> str:
    where = f"{r['data_set']}: " if r.get("data_set") else ""
    if r["status"] == DEGENERATE:
        gate = "passes" if r.get("gate_passed") else "FAILS"
        return f"{where}degenerate (all seeds equal {format_number(r['estimate'])}): a gate, {gate}"
    interval = (
        f"{format_number(r['estimate'])} [{format_number(r['low'])}, "
        f"{format_number(r['high'])}] ({METHOD_NAMES.get(r['method'], r['method'])}, "
        f"n = {r['seeds']})"
    )
    if not modes_found:
        return where + interval
    shown = ", ".join(
        f"{m['count']} seed{'s' if m['count'] > 1 else ''} at {format_number(m['mean'])} "
        f"({format_number(m['low'])} to {format_number(m['high'])})"
        for m in modes_found
    )
    return f"{where}modes: {shown}; judged on {interval}"


def measured_text(c: Mapping[str, Any]) -> str:
    """What a criterion of `results.json` measured, as the page shows it: each data set's
    interval with its method named, a degenerate reading as a gate, declared modes before the
    interval they are judged on; "not measured" without samples."""
    if c.get("estimate") is None:
        return "not measured"
    readings = c.get("readings") or [
        {**c, "data_set": "", "status": c.get("status"), "method": c["method"]}
    ]
    modes_by = {m["data_set"]: m["modes"] for m in c.get("modes") or []}
    return "; ".join(_reading_text(r, modes_by.get(r.get("data_set", ""), [])) for r in readings)

r"""The bounded summary of one measured step, for loggers that hold a few keys per step.

A model with $S$ sites of a type writes $S$ records per measured step (all of them go to the
JSONL sink). A logger (the Trainer's logs, W&B, Lightning's `log_dict`) gets instead, per
site type $T$ present in the step (`classification`, `mixture`, `attention`, ...):

* `trace/T/METRIC/p50`, `trace/T/METRIC/p90`, `trace/T/METRIC/max`: the median, 90th
  percentile (linear interpolation between order statistics) and maximum over the type's sites
  of each scalar metric (`step`, `K`, `rows` and `tolerance` are bookkeeping and left out; a metric that is
  `None` at a site is left out at that site);
* `trace/T/worst/SITE`: the health metric of the `top_k` worst sites by name, the lowest
  `effective_k` for responsibility sites (collapse drives it to 1) and the lowest `entropy`
  for attention sites (a head collapsing onto one key drives it to 0);

and `trace/alarms`, the number of alarm records of the step. So a step has at most
$1 + \sum_T (3 M_T + k)$ keys, with $M_T$ the scalar metrics of type $T$ (`key_bound`), however
deep the model: without a probe 12 for `classification`, 9 for `mixture` and 6 for
`attention` (8 at an SDPA site, with `alpha_residual` and `dropout`; a probe adds its own), i.e.
at most 97 keys with `top_k=3` and those three types (91 with eager attention).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from implicit_em.trace.records import Record

__all__ = ["BOOKKEEPING", "HEALTH", "health_metric", "key_bound", "quantile", "summarize"]

BOOKKEEPING = ("step", "K", "rows", "tolerance")
"""Numeric record fields that are no health metric and are not summarized."""

HEALTH = {"classification": "effective_k", "mixture": "effective_k", "attention": "entropy"}
"""The metric whose lowest values name the worst sites of each type (other types: the first
of `effective_k`, `entropy` that their records have)."""

STATISTICS = ("p50", "p90", "max")


def quantile(ordered: Sequence[float], q: float) -> float:
    """The `q`-quantile of ascending `ordered` values, interpolating linearly between order
    statistics (numpy's default): position $q(n-1)$."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def health_metric(kind: str, records: Sequence[Record]) -> str | None:
    """The metric naming the worst sites of type `kind` (`HEALTH`, else the first of
    `effective_k`, `entropy` that `records` have; None if neither)."""
    if kind in HEALTH:
        return HEALTH[kind]
    for metric in ("effective_k", "entropy"):
        if any(_scalar(r.get(metric)) for r in records):
            return metric
    return None


def summarize(records: Iterable[Record], top_k: int = 3, prefix: str = "trace") -> dict[str, float]:
    """The bounded keys of one measured step (see the module docstring).

    Parameters
    ----------
    records : iterable of dict
        The site and alarm records of one measured step.
    top_k : int, default=3
        Worst sites named per site type (0: none).
    prefix : str, default="trace"
        The first part of every key.

    Returns
    -------
    dict of str to float
        At most `key_bound` keys.

    Raises
    ------
    ValueError
        If `top_k` is negative.
    """
    if not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be a non-negative integer, got {top_k!r}")
    by_type: dict[str, list[Record]] = {}
    alarms = 0
    for r in records:
        if r["kind"] == "alarm":
            alarms += 1
        elif r["kind"] == "site":
            by_type.setdefault(r["type"], []).append(r)
    out: dict[str, float] = {}
    for kind, sites in sorted(by_type.items()):
        columns: dict[str, list[float]] = {}
        for r in sites:
            for key, value in r.items():
                if key not in BOOKKEEPING and _scalar(value) and math.isfinite(value):
                    columns.setdefault(key, []).append(float(value))
        for metric, values in sorted(columns.items()):
            values.sort()
            out[f"{prefix}/{kind}/{metric}/p50"] = quantile(values, 0.5)
            out[f"{prefix}/{kind}/{metric}/p90"] = quantile(values, 0.9)
            out[f"{prefix}/{kind}/{metric}/max"] = values[-1]
        health = health_metric(kind, sites)
        if health is not None and top_k:
            scored = [(r[health], r["site"]) for r in sites if _scalar(r.get(health))]
            for value, site in sorted(scored)[:top_k]:
                out[f"{prefix}/{kind}/worst/{site}"] = float(value)
    out[f"{prefix}/alarms"] = float(alarms)
    return out


def key_bound(metrics_per_type: Mapping[str, int], top_k: int = 3) -> int:
    """The most keys `summarize` writes for one step whose site types have these numbers of
    scalar metrics: $1 + \\sum_T (3 M_T + k)$, independent of the number of sites."""
    return 1 + sum(len(STATISTICS) * m + top_k for m in metrics_per_type.values())

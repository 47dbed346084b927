r"""From the sites kept by a measured step to the metrics of each, as Python numbers.

Sites whose kept records stack (same kind, options, shapes and dtypes: equally shaped sites
such as every attention layer of a model) are reduced together: their records are stacked along a new leading step axis and the kind computes their
statistics in one batched pass (tiny tensor operations cost microseconds each, so a batched
pass costs about what one site's pass costs). The statistics, with the probe's, are all-reduced
across ranks (`reduce_stats`) and finished into metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from implicit_em.trace.capture import Site
from implicit_em.trace.distributed import reduce_stats
from implicit_em.trace.metrics import Stats, finish_probe

__all__ = ["metric_values"]

_CHUNK_BYTES = 1 << 23
"""Kept bytes stacked per batched pass (at least one record). Small records (attention rows)
stack; a large one (the logits of a language model) is reduced alone, since a pass over
tensors larger than the caches costs more per element than several passes over smaller
ones. Statistics are sums and maxima, so chunks concatenate exactly."""

_PROBE_FLAGS = {"churn": "churn_n", "attention_drift": "drift_rows", "value_drift": "value_prev_sq"}
"""Probe metrics and the statistic that must be positive for them to exist."""


def metric_values(
    sites: Sequence[Site],
    probes: Sequence[Stats] | None,
    dead_fraction: float,
    slots: Sequence[int] | None = None,
) -> list[dict[str, Any] | None]:
    """The metrics of every site (None for an unmeasured one); `probes`: the probe
    statistics of each site (None without a probe).

    With `slots` (one index per site, `0 .. n-1`), the sites of one slot are one site seen in
    several micro-batches of a step: their statistics add up (sums and maxima, as across
    ranks) and the metrics of each slot are returned, in slot order."""
    groups: dict[tuple, list[int]] = {}
    for i, site in enumerate(sites):
        if site.kept is not None:
            groups.setdefault((id(site.kind), site.kept.group()), []).append(i)
    members = list(groups.values())
    with torch.no_grad():
        stats = [_group_stats(sites, index) for index in members]
        if probes is not None:
            for s, index in zip(stats, members, strict=True):
                for key in probes[index[0]]:
                    s[key] = torch.stack([probes[i][key].double().cpu() for i in index])
        stats = reduce_stats(stats)
    probed = probes is not None
    if slots is not None:
        return _slot_values(sites, members, stats, slots, probed, dead_fraction)
    values: list[dict[str, Any] | None] = [None] * len(sites)
    for s, index in zip(stats, members, strict=True):
        for i, row in zip(index, _finish(sites[index[0]], s, probed, dead_fraction), strict=True):
            values[i] = row
    return values


def _finish(site: Site, s: Stats, probed: bool, dead_fraction: float) -> list[dict[str, Any]]:
    """The metrics of each entry of the stacked statistics `s` of `site`'s kind."""
    metrics = site.kind.finish(s, dead_fraction)
    if probed:
        metrics |= finish_probe(s)
    columns = {key: t.tolist() for key, t in metrics.items()}
    flags = {key: s[flag].tolist() for key, flag in _PROBE_FLAGS.items() if key in metrics}
    rows = []
    for j in range(len(next(iter(s.values())))):
        row = {key: column[j] for key, column in columns.items()}
        for key, flag in flags.items():
            if not flag[j] > 0:
                row[key] = None
        rows.append(row)
    return rows


def _slot_values(
    sites: Sequence[Site],
    members: list[list[int]],
    stats: list[Stats],
    slots: Sequence[int],
    probed: bool,
    dead_fraction: float,
) -> list[dict[str, Any] | None]:
    """The metrics of each slot: the statistics of its measured sites summed (maxima for the
    keys ending in `_max`), then finished."""
    merged: dict[int, Stats] = {}
    first: dict[int, Site] = {}
    for s, index in zip(stats, members, strict=True):
        for j, i in enumerate(index):
            slot = slots[i]
            row = {key: v[j] for key, v in s.items()}
            if slot not in merged:
                merged[slot], first[slot] = row, sites[i]
                continue
            total = merged[slot]
            if total.keys() != row.keys() or any(total[k].shape != row[k].shape for k in row):
                raise RuntimeError(
                    f"site {sites[i].name!r} differs between the micro-batches of one step "
                    "(other statistics or shapes); its micro-batches cannot be merged"
                )
            for key, v in row.items():
                total[key] = (
                    torch.maximum(total[key], v) if key.endswith("_max") else total[key] + v
                )
    values: list[dict[str, Any] | None] = [None] * (max(slots) + 1 if slots else 0)
    for slot, total in merged.items():
        stacked = {key: v.unsqueeze(0) for key, v in total.items()}
        values[slot] = _finish(first[slot], stacked, probed, dead_fraction)[0]
    return values


def _group_stats(sites: Sequence[Site], index: list[int]) -> Stats:
    """The statistics of the group's sites (leading axis in `index` order), stacked in chunks
    of about `_CHUNK_BYTES` (the records of a group have equal shapes, so equal sizes)."""
    first = sites[index[0]].kept
    kind, cls = sites[index[0]].kind, type(first)
    per_chunk = max(1, _CHUNK_BYTES // max(1, first.nbytes()))
    parts = [
        kind.statistics(cls.stack([sites[i].kept for i in index[start : start + per_chunk]]))
        for start in range(0, len(index), per_chunk)
    ]
    if len(parts) == 1:
        return parts[0]
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}

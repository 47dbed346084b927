"""The published run's provenance, one row per experiment: its seeds, when its protocol was
registered and its run started, its units of work, their wall time and CPU-hours, the longest,
and the machines they ran on, with the run's totals; written from a report's results.json.

`docs/results-full.md` carries the table between two marker lines; `python -m
implicit_em.report.rendering.provenance_table PAGE RESULTS` writes it there, and a test keeps the
page in step with `results/full/`. A figure the run did not record (a run from before units kept
their CPU time, say) reads `not recorded`, never 0.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from implicit_em.report.rendering.marked import between, rewrite_block
from implicit_em.report.rules.protocol import seed_lists
from implicit_em.report.running.progress import duration

__all__ = ["BEGIN", "END", "provenance_table", "seed_ranges", "with_table"]

BEGIN = "<!-- provenance table: written from results/full/results.json -->"
END = "<!-- end of provenance table -->"

_UNRECORDED = "not recorded"


def seed_ranges(seeds: Iterable[int]) -> str:
    """`31000–31009, 9300–9319`: the distinct seeds as runs of consecutive integers, in the order
    their runs start."""
    distinct = sorted(set(seeds))
    runs: list[list[int]] = []
    for seed in distinct:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def provenance_table(document: Mapping[str, Any]) -> str:
    """The table of a report `document`, with its totals and its machine lines numbered (a
    row names its lines by number, as plain text: `[1]` would read as a link to the docs)."""
    machines: list[str] = []

    def machine_refs(units: Mapping[str, Any]) -> str:
        refs = []
        for line in units.get("machines") or []:
            if line not in machines:
                machines.append(line)
            refs.append(str(machines.index(line) + 1))
        return ", ".join(refs) or _UNRECORDED

    lines = [
        "| experiment | seeds | protocol registered | run started | units | unit wall time | "
        "CPU-hours | longest unit | machine lines |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    count = wall = cpu = 0.0
    unmeasured = untimed = 0
    for entry in document.get("experiments", []):
        seeds = seed_lists(entry.get("config") or {}) or entry.get("seeds") or []
        units = entry.get("units") or {}
        protocol = entry.get("protocol") or {}
        if units:
            count += units["count"]
            wall += units["seconds"]
            measured = units.get("cpu_seconds") is not None and units.get("cpu_units")
            cpu += units["cpu_seconds"] if measured else 0.0
            unmeasured += units["count"] - (units.get("cpu_units") or 0)
        else:
            untimed += 1
        cells = (
            entry["id"],
            f"{len(set(seeds))} ({seed_ranges(seeds)})" if seeds else _UNRECORDED,
            protocol.get("registered") or _UNRECORDED,
            entry.get("started") or _UNRECORDED,
            units.get("count", _UNRECORDED),
            duration(units["seconds"]) if units else _UNRECORDED,
            f"{units['cpu_hours']:.3f}" if units.get("cpu_hours") is not None else _UNRECORDED,
            (f"{units['longest']} ({units['longest_seconds']:.0f} s)" if units else _UNRECORDED),
            machine_refs(units) if units else _UNRECORDED,
        )
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    if not count:
        total = "The run recorded no units of work (it predates their records)."
    else:
        partly = f" (CPU time not recorded for {unmeasured:.0f} of them)" if unmeasured else ""
        missing = f"; {untimed} experiment(s) recorded no units" if untimed else ""
        total = (
            f"In all: {count:.0f} units of work{partly}, {duration(wall)} of unit wall time "
            f"and {cpu / 3600:.2f} CPU-hours{missing}."
        )
    lines += ["", total]
    if machines:
        lines += ["", "Machine lines:", ""] + [f"{i}. {m}" for i, m in enumerate(machines, 1)]
    return "\n".join(lines)


def with_table(text: str, document: Mapping[str, Any]) -> str:
    """`text` with the table between its marker lines replaced by the document's
    (`ValueError` when the markers are missing)."""
    return between(text, BEGIN, END, provenance_table(document))


def main(argv: Sequence[str]) -> int:
    """`python -m implicit_em.report.rendering.provenance_table PAGE RESULTS`."""
    return rewrite_block(argv, with_table)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""What the wind tunnel cost, as measured: for each kind of unit of E10–E12 (a task, or a branch
of one), how many units ran, their CPU-seconds and wall seconds per unit (median and range), and
their CPU-hours, with the run's totals and machine lines; written from the units' own records in
a report's results.json.

A unit's kind is its name without the seed (`hmm-seed9107` is `hmm`). A unit's CPU time is the
process time its worker spent on it (all its threads), its wall time the seconds from its start to
its end; a run whose units were not recorded reads `not recorded`, never 0.

`docs/windtunnel.md` carries the block between two marker lines; `python -m
implicit_em.report.rendering.cost_table PAGE RESULTS` writes it there, and a test keeps the page
in step with `results/full/`.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.rendering.marked import between, rewrite_block

__all__ = ["BEGIN", "END", "WIND_TUNNEL", "cost_table", "unit_kind", "with_table"]

BEGIN = "<!-- cost table: written from results/full/results.json -->"
END = "<!-- end of cost table -->"

WIND_TUNNEL = ("E10", "E11", "E12")
"""The experiments the block covers, in this order."""

_SEED = re.compile(r"-seed-?\d+$")


def unit_kind(name: str) -> str:
    """The unit's name without its seed: `hmm-seed9107` is `hmm`, `sticky` stays `sticky`."""
    return _SEED.sub("", name)


def _spread(values: Sequence[float]) -> str:
    """`574 (531–661)`: the median and the range, in whole seconds."""
    low, high = min(values), max(values)
    middle = statistics.median(values)
    if round(low) == round(high):
        return f"{middle:.0f}"
    return f"{middle:.0f} ({low:.0f}–{high:.0f})"


def cost_table(document: Mapping[str, Any], experiments: Sequence[str] = WIND_TUNNEL) -> str:
    """The block for a report `document`: one row per experiment and kind of unit, then the
    totals and the machine lines, or why there is no table."""
    entries = {e["id"]: e for e in document.get("experiments", [])}
    meta = document.get("meta", {})
    lines = [
        f"From the {meta.get('size', '?')}-size report of {meta.get('date', '?')}: each unit's "
        "own record of its CPU time (its worker process, all threads) and wall time.",
        "",
        "| experiment | unit | units | CPU-seconds per unit | wall seconds per unit | CPU-hours |",
        "|---|---|---|---|---|---|",
    ]
    machines: list[str] = []
    count = 0
    cpu_total = wall_total = 0.0
    unrecorded: list[str] = []
    for ident in experiments:
        entry = entries.get(ident)
        each = ((entry or {}).get("units") or {}).get("each") or {}
        if entry is None or not each:
            unrecorded.append(ident if entry is None else f"{ident} (no unit records)")
            continue
        for line in entry["units"].get("machines") or []:
            if line not in machines:
                machines.append(line)
        kinds: dict[str, list[Mapping[str, Any]]] = {}
        for name, record in each.items():
            kinds.setdefault(unit_kind(name), []).append(record)
        for kind, records in kinds.items():
            walls = [float(r["seconds"]) for r in records]
            cpus = [float(r["cpu_seconds"]) for r in records if r.get("cpu_seconds") is not None]
            count += len(records)
            wall_total += sum(walls)
            cpu_total += sum(cpus)
            whole = len(cpus) == len(records)
            cells = (
                ident,
                kind,
                len(records),
                _spread(cpus) if whole else "not recorded",
                _spread(walls),
                f"{sum(cpus) / 3600:.2f}" if whole else "not recorded",
            )
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    if not count:
        return (
            "The published full run recorded no units of work for the wind tunnel (it predates "
            "the units' records), so its cost was not measured; the estimate below is all there is."
        )
    missing = f" No units recorded for {', '.join(unrecorded)}." if unrecorded else ""
    lines += [
        "",
        f"In all: {count} units, {cpu_total / 3600:.2f} CPU-hours and {wall_total / 3600:.2f} h "
        f"of unit wall time.{missing}",
    ]
    if machines:
        lines += ["", "Machine lines:", ""] + [f"{i}. {m}" for i, m in enumerate(machines, 1)]
    return "\n".join(lines)


def with_table(text: str, document: Mapping[str, Any]) -> str:
    """`text` with the block between its marker lines replaced by the document's
    (`ValueError` when the markers are missing)."""
    return between(text, BEGIN, END, cost_table(document))


def main(argv: Sequence[str]) -> int:
    """`python -m implicit_em.report.rendering.cost_table PAGE RESULTS`."""
    return rewrite_block(argv, with_table)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

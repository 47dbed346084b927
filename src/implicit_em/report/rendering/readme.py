"""The README's claim table: its "full size" column, filled from the published full run.

The README shows the summary of a quick report (`summary.md`), whose "full size" column and
comparison line come from `render.full_cell` and `render.comparison_line`. `full_size_column`
rewrites exactly those parts from a published full-size document (or from none), with the same
two functions (an item's cell is its verdict as labelled by `item_verdicts.verdict_label`, with
the qualifier that says why an open verdict is open, or which alternative makes it fragile), so the README can always be brought to what `results/full` says, and a test can
tell when it is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from implicit_em.report.judging.item_verdicts import verdict_label
from implicit_em.report.rendering.render import (
    compared_with,
    comparison_line,
    full_cell,
    full_entries,
)

__all__ = ["full_size_column"]

FULL = "full size"
_PIPE = re.compile(r"(?<!\\)\|")
_COMPARISON = re.compile(r"^Size (\w+)[,:] ")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _PIPE.split(line)[1:-1]]


def _replace_cell(line: str, index: int, text: str) -> str:
    parts = _PIPE.split(line)
    parts[index + 1] = f" {text} "
    return "|".join(parts)


def _row_id(cells: list[str], header: list[str]) -> str:
    """The theory item of an item row, the experiment of an experiment row."""
    if header[0] == "item":
        return cells[0]
    return cells[header.index("experiment")].split(":", 1)[0]


def full_size_column(text: str, full: Mapping[str, Any] | None) -> str:
    """`text` (a README holding a quick summary) with its "full size" cells and its comparison
    line rewritten from the published full-size document `full` (None: not published).

    Raises `ValueError` when `text` has no item table with a "full size" column (an
    experiment table with one is filled too), or not exactly one comparison line.
    """
    published = full_entries(full)
    lines = text.split("\n")
    header: list[str] | None = None
    tables, comparisons = set(), 0
    for i, line in enumerate(lines):
        if match := _COMPARISON.match(line):
            meta = {"size": match[1], "compared_with": compared_with(full)}
            lines[i] = comparison_line(meta)
            comparisons += 1
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
            if FULL in cells and cells[0] in ("item", "claims"):
                tables.add(cells[0])
            continue
        if FULL not in header or set(cells) <= {"---"}:
            continue
        entry = published.get(_row_id(cells, header), {})
        verdict = verdict_label(entry) if entry.get("verdict") else None
        cell = full_cell(verdict, full is not None, bool(entry.get("exploratory")))
        lines[i] = _replace_cell(line, header.index(FULL), cell)
    if "item" not in tables or comparisons != 1:
        raise ValueError(
            "no claim table to fill: expected an item table with a "
            f"'{FULL}' column and one 'Size ...' comparison line"
        )
    return "\n".join(lines)

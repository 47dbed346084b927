"""The README's tables, written from the published full run: the answers table its report
section opens with, and the "full size" column of the quick summary it shows.

`answers_block` is the answers table of the published full-size document (`answers.answer_rows`,
the table the findings page and the report page open with), read again under the current rules
(`rejudge.rejudge_document`, as the findings page reads it), under one line naming the run. The
README shows the summary of a quick report (`summary.md`) too, whose "full size" column and
comparison line come from `render.full_cell` and `render.comparison_line`.
`full_size_column` rewrites exactly those parts, and the block between the `BEGIN` and `END`
lines, from a published full-size document (or from none), with the same functions (an item's
cell is its verdict as labelled by `item_verdicts.verdict_label`, with the qualifier that says
why an open verdict is open, or which alternative makes it fragile), so the README can always
be brought to what `results/full` says (`implicit-em publish` does), and a test can tell when
it is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from implicit_em.report.judging.item_verdicts import verdict_label
from implicit_em.report.judging.rejudge import rejudge_document
from implicit_em.report.rendering.answers import answer_rows, markdown_table
from implicit_em.report.rendering.marked import between
from implicit_em.report.rendering.render import (
    compared_with,
    comparison_line,
    full_cell,
    full_entries,
)

__all__ = ["BEGIN", "END", "answers_block", "full_size_column"]

BEGIN = "<!-- answers table: written from results/full by implicit-em publish -->"
END = "<!-- end of the answers table -->"

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


def answers_block(full: Mapping[str, Any] | None) -> str:
    """The README's answers table: the published full-size document `full` read again under
    the current rules, under one line naming it (a line saying none is published without
    one)."""
    if full is None:
        return "No full-size run is published yet."
    judged = rejudge_document(full)
    meta = judged["meta"]
    published = (meta.get("publication") or {}).get("date") or meta.get("date", "?")
    head = (
        f"The published full-size run (`results/full/`, {published}), read under the item rules "
        "in force; each item's block is in [docs/findings.md](docs/findings.md)."
    )
    return "\n".join([head, "", *markdown_table(answer_rows(judged["claim_verdicts"]))])


def full_size_column(text: str, full: Mapping[str, Any] | None) -> str:
    """`text` (a README holding a quick summary) with its "full size" cells and its comparison
    line rewritten from the published full-size document `full` (None: not published), and
    the answers table between its `BEGIN` and `END` lines, where it has them (`answers_block`).

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
    text = "\n".join(lines)
    return between(text, BEGIN, END, answers_block(full)) if BEGIN in text else text

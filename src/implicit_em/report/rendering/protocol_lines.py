"""The gates and criteria of each experiment as docs/report.md lists them, written from the
registered protocols and the experiments' known-answer controls.

Each experiment's section of the guide (`### EN ...`) lists its gates and criteria, one bullet
each, with what each reads, its interval method and whether it is the item's first-stated
primary, how it could have failed, its known-answer controls (and whether the negative one is
realistic), the condition it is read under and the rival's own-task gates. `with_lines` writes
those generated lines into each section in place of the old ones, keeping any note written under
a criterion by hand (a quick reading, say); `python -m implicit_em.report.rendering.protocol_lines
PAGE` rewrites the page, and a test keeps the page in step with the protocols.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.rendering.marked import rewrite_page
from implicit_em.report.running.registry import Experiment, select

__all__ = ["GENERATED", "experiment_lines", "with_lines"]

GENERATED = (
    "- Gate: ",
    "- Criterion (",
    "    - Controls: ",
    "    - Read on its item only where ",
    "    - Rival's own-task gate",
    "    - Baseline: ",
)
"""How the lines this module writes (or wrote before: `Baseline:`) begin; a line under a
criterion that begins otherwise is a note written by hand, and is kept."""

_NUMBER = re.compile(r"^- (?:Gate|Criterion \([^)]*\)): `([A-Za-z0-9_]+) ")


def _check(g: Mapping[str, Any]) -> str:
    return f"`{g['number']} {g['op']} {float(g['threshold']):g}`"


def _gate(g: Mapping[str, Any]) -> str:
    verifies = f"; verifies {g['verifies']}" if g.get("verifies") else ""
    return f"- Gate: {_check(g)} ({g['means']}{verifies})."


def _criterion(c: Mapping[str, Any], experiment: Experiment) -> list[str]:
    tags = f"{c['claim']}, {c['direction']}; {c.get('method', 't')}"
    tags += "; primary" if c.get("primary") else ""
    where = " on every data set" if c.get("combine") == "all" else ""
    failed = f" Could have failed: {c['how_it_could_fail']}." if c.get("how_it_could_fail") else ""
    lines = [f"- Criterion ({tags}): {_check(c)}{where} ({c['means']}).{failed}"]
    controls = experiment.controls.get(c["number"])
    negative = c.get("negative_control") or {}
    if controls is not None:
        kind = negative.get("kind", "")
        why = f": {negative['why']}" if kind == "trivial" and negative.get("why") else ""
        lines.append(
            f"    - Controls: positive: {controls.positive.says}; negative"
            f"{f' ({kind}{why})' if kind else ''}: {controls.negative.says}."
        )
    for need in c.get("requires", []):
        checks = " and ".join(_check(g) for g in need["gates"])
        lines.append(f"    - Read on its item only where {checks}, else *{need['says']}*.")
    baseline = c.get("baseline")
    if baseline:
        checks = ", ".join(_check(g) for g in baseline["gates"])
        plural = "s" if len(baseline["gates"]) > 1 else ""
        lines.append(f"    - Rival's own-task gate{plural}: {checks} ({baseline['says']}).")
    return lines


def experiment_lines(experiment: Experiment) -> list[list[str]]:
    """The generated lines of an experiment: one list per gate, then one per criterion (its
    bullet and its generated sub-bullets), in the protocol's order."""
    data = experiment.protocol.data
    return [[_gate(g)] for g in data.get("gates", [])] + [
        _criterion(c, experiment) for c in data["criteria"]
    ]


def _section(lines: Sequence[str], ident: str) -> tuple[int, int]:
    """The line range of experiment `ident`'s section (`### EN ...` up to the next heading)."""
    start = next((i for i, line in enumerate(lines) if line.startswith(f"### {ident} ")), None)
    if start is None:
        raise ValueError(f"the page has no section '### {ident} ...'")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(("### ", "## "))),
        len(lines),
    )
    return start, end


def _rewrite(section: list[str], blocks: list[list[str]]) -> list[str]:
    """`section` with its generated lines replaced by `blocks`, at the place of the first one;
    a hand-written sub-bullet stays under the gate or criterion it was under."""
    notes: dict[str, list[str]] = {}
    first = None
    kept: list[str] = []
    current = None
    for line in section:
        if line.startswith(GENERATED):
            first = len(kept) if first is None else first
            match = _NUMBER.match(line)
            current = match.group(1) if match else current
            continue
        if current is not None and line.startswith("    "):
            notes.setdefault(current, []).append(line)
            continue
        current = None
        kept.append(line)
    if first is None:
        raise ValueError(f"{section[0]!r}: the section lists no gate or criterion")
    generated = []
    for block in blocks:
        number = _NUMBER.match(block[0]).group(1)  # type: ignore[union-attr]
        generated += block + notes.pop(number, [])
    if notes:
        raise ValueError(f"{section[0]!r}: notes under unknown numbers {sorted(notes)}")
    return kept[:first] + generated + kept[first:]


def with_lines(text: str, experiments: Sequence[Experiment] | None = None) -> str:
    """`text` (docs/report.md) with every experiment's gates and criteria written afresh."""
    lines = text.split("\n")
    for experiment in experiments or select(None):
        start, end = _section(lines, experiment.id)
        lines[start:end] = _rewrite(lines[start:end], experiment_lines(experiment))
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """`python -m implicit_em.report.rendering.protocol_lines PAGE`."""
    return rewrite_page(argv, "PAGE", lambda text, args: with_lines(text))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The table of where each item is checked, written from the item registry (`items.json`).

`docs/theory.md` carries it between two marker lines; `check_page` says whether the page holds
the table the registry gives, and `python -m implicit_em.report.items.table PAGE` writes it
there, so the page cannot drift from the rules the report applies.
"""

from __future__ import annotations

import sys
from pathlib import Path

from implicit_em.report.items.registry import Item, Part, Registry, load_registry

__all__ = ["BEGIN", "END", "check_page", "items_table", "with_table"]

BEGIN = "<!-- items table: written from report/protocols/items.json -->"
END = "<!-- end of items table -->"


def _reads(part: Part) -> str:
    """What a part is read from: its criteria (with the direction where the item reads one the
    other way), its gates, its algebra, or why nothing tests it."""
    reads = [
        f"`{r.experiment}:{r.number}`" + (f" ({r.direction})" if r.direction else "")
        for r in part.criteria
    ]
    reads += [f"gate `{r.experiment}:{r.number}`" for r in part.gates]
    if part.algebra:
        reads.append(f"algebra: {part.algebra}")
    if part.untested:
        reads.append(f"not tested: {part.untested}")
    if part.reads:
        reads.append(f"by reading ({part.reads}): {part.read_why}")
    if part.beside:
        reads.append(f"beside the item, no vote: {part.beside}")
    return "; ".join(reads) or "nothing"


def _rows(item: Item) -> list[str]:
    if item.not_testable:
        return [
            f"| {item.id} | {item.form or ''} | (the whole item) | not testable: "
            f"{item.not_testable} | |"
        ]
    alternatives = ", ".join(a.says for a in item.alternatives) or ""
    rows = []
    for i, part in enumerate(item.parts):
        quote = part.quote.replace("|", "\\|")
        reads = _reads(part).replace("|", "\\|")
        last = alternatives.replace("|", "\\|") if i == 0 else ""
        first = f"{item.id} | {item.form or ''}" if i == 0 else " | "
        rows.append(f"| {first} | “{quote}” | {reads} | {last} |")
    return rows


def items_table(registry: Registry | None = None) -> str:
    """The markdown table: one row per part of every item, with what it is read from and,
    on the item's first row, its logical form and the alternatives its verdict is also shown
    under."""
    registry = registry or load_registry()
    lines = [
        "| item | form | part (quoted) | read from | also read under |",
        "|---|---|---|---|---|",
    ]
    for item in registry.items.values():
        lines += _rows(item)
    return "\n".join(lines)


def with_table(text: str, registry: Registry | None = None) -> str:
    """`text` with the table between its marker lines replaced by the registry's
    (`ValueError` when the markers are missing)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN!r} ... {END!r} lines")
    return f"{text[: start + len(BEGIN)]}\n{items_table(registry)}\n{text[end:]}"


def check_page(path: Path, registry: Registry | None = None) -> bool:
    """Whether the page at `path` holds the table the registry gives."""
    text = path.read_text(encoding="utf-8")
    return text == with_table(text, registry)


def main(argv: list[str]) -> int:
    """Write the table into each page named in `argv`."""
    for name in argv:
        path = Path(name)
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The registered versions of the protocols, as docs/report.md lists them: written from the
protocol registry (`report/protocols/registry.json`).

One bullet per registration event (a date and a reason, which may cover several experiments):
the first registration of each experiment, and every amendment with its reason, whether it was
made after data, what had been seen and on which seeds. `docs/report.md` carries the list
between two marker lines; `python -m implicit_em.report.rendering.protocol_history PAGE` writes
it there, and a test keeps the page in step with the registry.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from implicit_em.report.rendering.changes import id_order
from implicit_em.report.rendering.marked import between, rewrite_page
from implicit_em.report.rendering.provenance_table import seed_ranges
from implicit_em.report.rules.registration import read_registry

__all__ = ["BEGIN", "END", "history_lines", "with_history"]

BEGIN = "<!-- protocol versions: written from report/protocols/registry.json -->"
END = "<!-- end of protocol versions -->"


def _ids(idents: Iterable[str]) -> str:
    return ", ".join(sorted(set(idents), key=id_order))


def history_lines(registry: Mapping[str, Any] | None = None) -> list[str]:
    """One bullet per registration event, oldest first."""
    registry = read_registry() if registry is None else registry
    events: dict[tuple[str, str], dict[str, Any]] = {}
    for ident, entry in registry.items():
        for version in entry.get("versions", []):
            amendment = version.get("amendment") or {}
            key = (version["registered"], amendment.get("reason", ""))
            event = events.setdefault(key, {"ids": [], "amendment": amendment})
            event["ids"].append(ident)
    lines = []
    for (when, reason), event in sorted(events.items()):
        ids = _ids(event["ids"])
        amendment = event["amendment"]
        if not reason:
            lines.append(f"- **{when}** ({ids}): registered.")
            continue
        if amendment.get("after_data"):
            seeds = amendment.get("seeds_seen") or []
            on = f" (seeds {seed_ranges(seeds)})" if seeds else ""
            seen = amendment.get("seen") or "not recorded"
            data = f" After data{on}: {seen.rstrip('.')}."
        else:
            data = " Before any data it bears on."
        lines.append(f"- **{when}** ({ids}): {reason.rstrip('.')}.{data}")
    return lines


def with_history(text: str, registry: Mapping[str, Any] | None = None) -> str:
    """`text` with the list between its marker lines replaced by the registry's
    (`ValueError` when the markers are missing)."""
    return between(text, BEGIN, END, "\n".join(history_lines(registry)))


def main(argv: Sequence[str]) -> int:
    """`python -m implicit_em.report.rendering.protocol_history PAGE`."""
    return rewrite_page(argv, "PAGE", lambda text, args: with_history(text))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

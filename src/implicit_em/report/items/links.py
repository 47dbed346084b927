r"""Links between items: pairs whose verdicts cannot both hold.

A link (`registry.Link`) names two items and the pairs of verdicts that contradict each other
(T1 `supported` and C11 `supported`: a sigmoid transformer that matches the posterior refutes
C11's "necessary"). When both items read a confident verdict (`CONFIDENT`) that the link
forbids, both read `inconsistent`, each naming the other and the link's reason: the page never
shows two confident colours that cannot both be right. Every link is listed on both items,
contradicting or not.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

from implicit_em.report.items.registry import Link

__all__ = ["CONFIDENT", "INCONSISTENT", "apply_links"]

CONFIDENT = ("supported", "refuted", "stands", "answered", "verified (algebra)")
"""The verdicts a link can find in contradiction (open verdicts cannot contradict)."""

INCONSISTENT = "inconsistent"


def apply_links(results: MutableMapping[str, dict[str, Any]], links: Sequence[Link]) -> None:
    """Record each link on both of its items in `results` (by id, each with `verdict`) and make
    both `inconsistent` where their verdicts (as they were before any link) contradict; items not
    in `results` are skipped."""
    before = {ident: entry["verdict"] for ident, entry in results.items()}
    for link in links:
        a, b = link.items
        if a not in results or b not in results:
            continue
        pair = (before[a], before[b])
        contradicts = pair in link.contradict and all(v in CONFIDENT for v in pair)
        for this, other in ((a, b), (b, a)):
            entry = results[this]
            entry.setdefault("links", []).append(
                {"with": other, "reason": link.reason, "contradicts": contradicts}
            )
            if contradicts:
                entry["verdict"] = INCONSISTENT
                entry["qualifier"] = f"with {other}"
                entry["reason"] = f"{link.reason} ({a} {pair[0]}, {b} {pair[1]}). {entry['reason']}"

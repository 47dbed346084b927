r"""Item verdicts: one verdict per theory item (claim, objection, test), read from the votes of
the criteria that bear on it (`implicit_em.report.judging.Criterion`, as results.json records
them).

A criterion votes `for` the item when it is met and supports it or is not met and refutes it,
`against` in the two other cases, `undecided` when its interval straddles the threshold, and
casts no vote when its known-answer controls did not come out as planted (`uncontrolled`) or
when its interval has zero width (`degenerate`: a gate, `implicit_em.report.readings`). The
item's verdict is its primary criterion's vote; an item a sanity gate verifies reads that gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ALGEBRA_WORDS",
    "CLAIM_WORDS",
    "OBJECTION_WORDS",
    "claim_verdicts",
    "controls_pass",
]

CLAIM_WORDS = ("supported", "refuted", "mixed", "inconclusive", "not tested")
OBJECTION_WORDS = ("stands", "answered", "mixed", "inconclusive", "not tested")
ALGEBRA_WORDS = ("verified (algebra)", "violated (algebra)")


def controls_pass(statuses: Mapping[str, Any] | None) -> bool:
    """Whether a criterion's known-answer controls came out as planted: the positive `met`,
    the negative `not met` (`implicit_em.report.controls`)."""
    return (
        statuses is not None
        and statuses.get("positive") == "met"
        and statuses.get("negative") == "not met"
    )


def _vote(c: Mapping[str, Any]) -> str:
    """`for`, `against`, `undecided`, or no vote: `uncontrolled` (its known-answer controls did
    not come out as planted) or `degenerate` (a gate) for a results.json criterion."""
    if not controls_pass(c.get("controls")):
        return "uncontrolled"
    if c["status"] == "degenerate":
        return "degenerate"
    if c["status"] not in ("met", "not met"):
        return "undecided"
    return "for" if (c["status"] == "met") == (c["direction"] == "supports") else "against"


def _word(item: str, vote: str | None) -> str:
    words = OBJECTION_WORDS if item[0] in "Rm" else CLAIM_WORDS
    return {"for": words[0], "against": words[1], "undecided": words[3]}.get(vote or "", words[4])


def claim_verdicts(
    items: Sequence[str], experiments: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One verdict per theory item, read from its primary criterion.

    `experiments` are results.json entries (`id`, `verdict`, `criteria`, `gates`). Each criterion
    votes `for` (met and supports, or not met and refutes), `against`, `undecided`, or
    `uncontrolled` when its known-answer controls did not both come out as planted. The item's
    verdict is its **primary** criterion's vote: for a claim `supported`, `refuted` or
    `inconclusive`, for an objection `stands`, `answered` or `inconclusive`; `not tested` when
    it has no primary that ran and earned its vote. Every other criterion on the item is shown
    beside it (`evidence`, the primary first) and does not change it. An item that a sanity gate
    `verifies` is `verified (algebra)` when that gate passed (`violated (algebra)` when not).
    An invalid or not-run experiment casts no vote; it is listed under `excluded`. An item is
    `exploratory` when the experiment of its primary criterion is (an amendment made after that
    experiment's seeds were seen): its verdict stands only once rerun on fresh seeds.
    """
    out = []
    for item in items:
        evidence, excluded, ids, algebra = [], [], [], None
        for e in experiments:
            bears = any(c["claim"] == item for c in e["criteria"]) or any(
                g.get("verifies") == item for g in e.get("gates", [])
            )
            if e["verdict"] in ("invalid", "not run"):
                if bears:
                    excluded.append({"experiment": e["id"], "verdict": e["verdict"]})
                continue
            for g in e.get("gates", []):
                if g.get("verifies") == item:
                    # verified when every gate verifying the item passed; one failure violates it
                    failed = not g["passed"] or algebra == ALGEBRA_WORDS[1]
                    algebra = ALGEBRA_WORDS[1] if failed else ALGEBRA_WORDS[0]
                    if e["id"] not in ids:
                        ids.append(e["id"])
            for c in e["criteria"]:
                if c["claim"] != item:
                    continue
                if e["id"] not in ids:
                    ids.append(e["id"])
                evidence.append(
                    {
                        "experiment": e["id"],
                        "number": c["number"],
                        "estimate": c["estimate"],
                        "low": c["low"],
                        "high": c["high"],
                        "op": c["op"],
                        "threshold": c["threshold"],
                        "status": c["status"],
                        "direction": c["direction"],
                        "primary": bool(c.get("primary")),
                        "controls": c.get("controls"),
                        "vote": _vote(c),
                    }
                )
        evidence.sort(key=lambda v: not v["primary"])
        primary = next((v for v in evidence if v["primary"]), None)
        exploratory = (
            primary is not None
            and algebra is None
            and any(e["id"] == primary["experiment"] and e.get("exploratory") for e in experiments)
        )
        if algebra is not None:
            verdict = algebra
        elif primary is None or primary["vote"] in ("uncontrolled", "degenerate"):
            verdict = _word(item, None)
        else:
            verdict = _word(item, primary["vote"])
        out.append(
            {
                "id": item,
                "verdict": verdict,
                "primary": None if primary is None else primary["number"],
                "primary_experiment": None if primary is None else primary["experiment"],
                "exploratory": exploratory,
                "experiments": ids,
                "evidence": evidence,
                "excluded": excluded,
            }
        )
    return out

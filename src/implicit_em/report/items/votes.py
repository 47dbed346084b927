r"""Votes: each criterion's standing and vote, each part's reading from them, the item's verdict.

**A criterion** (a results.json criterion, with its item marks) votes `for` the item when it is
met and supports the item or is not met and refutes it (the direction is the registered one, or
the item's own where the registry reads it the other way), `against` in the two other cases, and
`undecided` when its interval straddles the threshold. It casts **no vote** when its standing is
not `counted`, in this order:

1. `excluded`: its experiment is `invalid` or `not run`;
2. `by construction`: it holds or is fixed by algebra or by how the experiment is built;
   `degenerate`: its interval has zero width (every seed gave the same value), a gate and not a
   measurement (`implicit_em.report.judging.readings`);
3. `baseline failed`: it compares with a rival that fails its own task (the criterion's
   `baseline` gates); it votes `undecided` (`inconclusive: baseline failed`), since the
   comparison cannot decide; then a failed requirement (`requires`): its standing is what the
   requirement `says` (`not converged`: it votes `undecided`, so the item reads
   `inconclusive (not converged)`; `not testable on this task`: no vote);
4. `controls not as planted`: its known-answer controls did not come out as planted;
5. `negative control not classified` or `no realistic negative control`: its negative control
   is not a trained rival lacking exactly the mechanism (`controls.NegativeControl`);
6. `not measured`: no interval.

In an item whose form is `comparative` a counted criterion without its rival's own-task gates
(`baseline`) reads `rival not shown to work` and casts no vote (`forms.needs_rival`).

**A part** of an item about presentation that is decided by reading (`reads`) reads so, its
reason quoting the text (the item's qualifier: `by reading`). Otherwise a part reads `violated`
when a gate it names failed; else, from its criteria's votes, by the item's logical form
(`forms.part_vote`: one working counterexample decides a universal or necessity part against
it, one working instance an existential part for it; otherwise `for` or `against` when all
agree, `mixed` when some are for and some against, `undecided` when one is undecided and none
disagree); with no vote, `algebra` when its gates passed or its criteria hold by construction
and it states why that verifies it, else `not tested` with the reason. A part `beside` the
item is read the same way and shown as a finding, but left out of the verdict.

**An item** of a universal or necessity form is refuted (objection: answered) as soon as one
part is against (`forms.combine_against`); otherwise, and for every other form, under the rule
`all` (a compound claim needs every part), from its parts' readings:

* `violated (algebra)` when a part is violated;
* `not tested` when no part votes (`verified (algebra)` when every part is algebra);
* `refuted` (objection: `answered`) when some part is against: a conjunction with a false
  conjunct is false, whatever its other parts read (the parts that held are shown beside it);
* `mixed` when a part is mixed (its own criteria disagree and its form has no rule that
  decides between them) and none is against;
* `inconclusive` when a part is undecided or not tested (and none against);
* `supported` (objection: `stands`) when every part is for or verified by algebra.

**An existential item read per instance** (its parts name an `instance`: C14d's monitors,
each of which must both detect the collapses and keep quiet where there is none) is read once
per instance, from that instance's parts and the parts shared by all, by the rules above. One
instance `supported` (or verified by algebra) answers it (decided by that instance's parts); it
is refuted only when every instance is; otherwise it reads as its least decided instance (`violated`, `mixed`,
`inconclusive`, `not tested`, in this order), so parts that hold in *different* instances never
add up to an instance that holds them all.

`decided_by` names the parts whose readings gave the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.items.forms import combine_against, needs_rival, part_vote
from implicit_em.report.items.marks import baseline_failures, failed_requirement
from implicit_em.report.items.registry import Item, Part, Ref
from implicit_em.report.judging.controls import NegativeControl

__all__ = [
    "ALGEBRA_WORDS",
    "CLAIM_WORDS",
    "OBJECTION_WORDS",
    "controls_pass",
    "criterion_reading",
    "item_reading",
    "part_reading",
]

CLAIM_WORDS = ("supported", "refuted", "mixed", "inconclusive", "not tested")
OBJECTION_WORDS = ("stands", "answered", "mixed", "inconclusive", "not tested")
ALGEBRA_WORDS = ("verified (algebra)", "violated (algebra)")
VOTES = ("for", "against", "undecided")

Index = Mapping[tuple[str, str], Mapping[str, Any]]
"""A document's criteria by (experiment id, number)."""


def controls_pass(statuses: Mapping[str, Any] | None) -> bool:
    """Whether a criterion's known-answer controls came out as planted: the positive `met`,
    the negative `not met` (`implicit_em.report.judging.controls`)."""
    return (
        statuses is not None
        and statuses.get("positive") == "met"
        and statuses.get("negative") == "not met"
    )


def _standing(c: Mapping[str, Any], experiment: Mapping[str, Any]) -> tuple[str, str]:
    """(standing, why) of a criterion that could vote; `counted` when it votes."""
    if experiment.get("verdict") in ("invalid", "not run"):
        return "excluded", f"{experiment['id']} is {experiment['verdict']}"
    if c.get("alternative"):
        return "counted", c["alternative"]
    if c.get("by_construction"):
        return "by construction", c["by_construction"]
    if c.get("status") == "degenerate":
        return "degenerate", "a zero-width interval (every seed gave the same value): a gate"
    failed = baseline_failures(c, experiment.get("numbers", {}))
    if failed:
        return "baseline failed", f"{c['baseline']['says']}: " + "; ".join(failed)
    requirement = failed_requirement(c, experiment.get("numbers", {}))
    if requirement is not None:
        condition, lines = requirement
        return str(condition["says"]), "; ".join(lines)
    if not controls_pass(c.get("controls")):
        return "controls not as planted", str(c.get("controls"))
    negative = NegativeControl.from_data(c.get("negative_control"))
    if negative is None:
        return "negative control not classified", "its protocol does not say what it removes"
    if not negative.realistic:
        return "no realistic negative control", negative.why
    if c.get("status") is None:
        return "not measured", "no interval"
    return "counted", ""


def criterion_reading(
    ref: Ref,
    index: Index,
    experiments: Mapping[str, Mapping[str, Any]],
    form: str | None = None,
) -> dict[str, Any]:
    """What one referenced criterion says of its item (of logical `form`): the numbers,
    `standing`, `why`, `vote` (`for`, `against`, `undecided`, or `no vote`) and `held_open` (a
    failed requirement, such as `not converged`, makes it `undecided`)."""
    c = index.get(ref.key)
    experiment = experiments.get(ref.experiment, {"id": ref.experiment, "verdict": "not run"})
    if c is None:
        c = {"number": ref.number, "status": None, "direction": ref.direction or "supports"}
        standing, why = "not measured", f"{ref.text} is not in this report"
    else:
        standing, why = _standing(c, experiment)
    if standing == "counted" and needs_rival(form) and not c.get("baseline"):
        standing = "rival not shown to work"
        why = "a comparison counts only once its rival's own-task gates are declared and pass"
    direction = ref.direction or c["direction"]
    vote = "no vote"
    held_open = _requirement_reads(c, standing) == "undecided"
    if standing == "baseline failed" or held_open:
        vote = "undecided"
    elif standing == "counted":
        status = c.get("status")
        vote = (
            "undecided"
            if status not in ("met", "not met")
            else "for"
            if (status == "met") == (direction == "supports")
            else "against"
        )
    keys = ("estimate", "low", "high", "op", "threshold", "status", "method", "controls")
    return {
        "experiment": ref.experiment,
        "number": ref.number,
        **{k: c.get(k) for k in keys},
        "direction": direction,
        "read_as": ref.why,
        "primary": bool(c.get("primary")),
        "negative_control": c.get("negative_control"),
        "standing": standing,
        "why": why,
        "vote": vote,
        "held_open": held_open,
    }


def _requirement_reads(c: Mapping[str, Any], standing: str) -> str:
    """How `c` reads when `standing` is one of its failed requirements (empty otherwise)."""
    return next((str(r["reads"]) for r in c.get("requires") or [] if r["says"] == standing), "")


def _gate(ref: Ref, experiments: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    experiment = experiments.get(ref.experiment)
    found = next(
        (g for g in (experiment or {}).get("gates", []) if g.get("name") == ref.number), None
    )
    passed = None if found is None or found["passed"] is None else bool(found["passed"])
    if experiment is not None and experiment.get("verdict") == "not run":
        passed = None
    detail = found["detail"] if found else f"{ref.text} not in this report"
    return {"experiment": ref.experiment, "name": ref.number, "passed": passed, "detail": detail}


def part_reading(
    part: Part,
    index: Index,
    experiments: Mapping[str, Mapping[str, Any]],
    form: str | None = None,
) -> dict[str, Any]:
    """One part's reading under the item's logical `form` (`for`, `against`, `mixed`,
    `undecided`, `algebra`, `violated`, `not tested`), its `reason`, `beside` (why it is a
    finding beside the item, or empty), and the readings of its criteria and gates."""
    criteria = [criterion_reading(r, index, experiments, form) for r in part.criteria]
    gates = [_gate(r, experiments) for r in part.gates]
    votes = [c["vote"] for c in criteria if c["vote"] in VOTES]
    construction = bool(criteria) and all(c["standing"] == "by construction" for c in criteria)
    if part.reads:
        reading, reason = part.reads, f"by reading: {part.read_why}"
    elif any(g["passed"] is False for g in gates):
        reading, reason = "violated", "a gate failed: " + "; ".join(g["detail"] for g in gates)
    elif votes:
        reading = part_vote(form, votes)
        held = [c for c in criteria if c["vote"] == "undecided" and c["standing"] != "counted"]
        reason = "; ".join(f"{c['standing']}: {c['why']}" for c in held)
    elif gates and all(g["passed"] for g in gates):
        reading, reason = "algebra", "; ".join(g["detail"] for g in gates)
    elif construction and part.algebra:
        reading, reason = "algebra", part.algebra
    elif part.untested or not criteria:
        reading, reason = "not tested", part.untested or "nothing measures it"
    else:
        standings = dict.fromkeys(c["standing"] for c in criteria)
        reading, reason = "not tested", "; ".join(standings)
    return {
        "id": part.id,
        "quote": part.quote,
        "reading": reading,
        "reason": reason,
        "beside": part.beside,
        "instance": part.instance,
        "criteria": criteria,
        "gates": gates,
    }


def _combine(parts: Sequence[Mapping[str, Any]], form: str | None) -> tuple[str, list[str]]:
    """The item's reading key and the parts that decided it: a working counterexample to a
    universal or necessity form decides it against; else the rule `all`."""
    if not any(p["reading"] == "violated" for p in parts):
        against = combine_against(form, parts)
        if against:
            return "against", against
    by: dict[str, list[str]] = {}
    for p in parts:
        by.setdefault(p["reading"], []).append(p["id"])
    get = by.get
    if get("violated"):
        return "violated", by["violated"]
    if not any(get(k) for k in ("for", "against", "mixed", "undecided")):
        return (
            ("algebra", by["algebra"])
            if set(by) == {"algebra"}
            else ("not tested", by.get("not tested", []))
        )
    if get("against"):
        return "against", by["against"]
    if get("mixed"):
        return "mixed", by["mixed"]
    if get("undecided") or get("not tested"):
        return "undecided", [*by.get("undecided", []), *by.get("not tested", [])]
    return "for", by["for"]


_OPEN_ORDER = ("violated", "mixed", "undecided", "not tested")
"""How an existential item read per instance reads when no instance holds and not every one is
refuted: the first of these that some instance reads."""


def _combine_instances(
    parts: Sequence[Mapping[str, Any]], form: str | None
) -> tuple[str, list[str]]:
    """`_combine` per instance (its own parts and the shared ones): one instance `for` decides
    the item for it, every instance `against` decides it against; else the least decided."""
    names = list(dict.fromkeys(p["instance"] for p in parts if p.get("instance")))
    if not names:
        return _combine(parts, form)
    readings = {
        n: _combine([p for p in parts if p.get("instance") in ("", n)], form) for n in names
    }
    for holds in ("for", "algebra"):
        holding = [n for n in names if readings[n][0] == holds]
        if holding:
            return readings[holding[0]]
    keys = {readings[n][0] for n in names}
    if keys == {"against"}:
        return "against", list(dict.fromkeys(d for n in names for d in readings[n][1]))
    key = next(k for k in _OPEN_ORDER if k in keys)
    return key, list(
        dict.fromkeys(d for n in names if readings[n][0] == key for d in readings[n][1])
    )


def _word(item: str, key: str) -> str:
    words = OBJECTION_WORDS if item[0] in "Rm" else CLAIM_WORDS
    return {
        "for": words[0],
        "against": words[1],
        "mixed": words[2],
        "undecided": words[3],
        "not tested": words[4],
        "algebra": ALGEBRA_WORDS[0],
        "violated": ALGEBRA_WORDS[1],
    }[key]


def _qualifier(key: str, parts: Sequence[Mapping[str, Any]], decided: Sequence[str]) -> str:
    """The short reason shown after an open verdict (why the deciding parts did not vote), or
    `by reading` after one decided by reading the text."""
    if key in ("for", "against") and all(
        p["reason"].startswith("by reading") for p in parts if p["id"] in decided
    ):
        return "by reading"
    if key not in ("not tested", "undecided"):
        return ""
    reasons = []
    for p in parts:
        if p["id"] not in decided:
            continue
        if p["reading"] == "undecided":
            held = [
                c["standing"]
                for c in p["criteria"]
                if c["vote"] == "undecided" and c["standing"] != "counted"
            ]
            reasons += held or ["interval straddles"]
        elif p["reading"] == "not tested":
            standings = [c["standing"] for c in p["criteria"] if c["vote"] == "no vote"]
            reasons += standings or (
                ["not measured"] if p["gates"] else ["a part nothing measures"]
            )
    return ", ".join(dict.fromkeys(reasons))


def item_reading(
    item: Item, index: Index, experiments: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The item's verdict under its form and rule: `verdict`, `qualifier` (why an open verdict
    is open), `reason` (one line), `parts` (each part's reading, those beside the item
    included) and `decided_by`."""
    parts = [part_reading(p, index, experiments, item.form) for p in item.parts]
    voting = [p for p in parts if not p["beside"]]
    if item.not_testable:
        short = item.not_testable.split(":", 1)[0]
        return {
            "verdict": _word(item.id, "not tested"),
            "qualifier": short,
            "reason": item.not_testable,
            "parts": parts,
            "decided_by": [],
        }
    key, decided = _combine_instances(voting, item.form)
    qualifier = _qualifier(key, voting, decided)
    lines = [
        f"{p['id']}: {p['reading']}" + (f" ({p['reason']})" if p["reason"] else "")
        for p in parts
        if p["id"] in decided
    ]
    return {
        "verdict": _word(item.id, key),
        "qualifier": qualifier,
        "reason": "; ".join(lines),
        "parts": parts,
        "decided_by": decided,
    }

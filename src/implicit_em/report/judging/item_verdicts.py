r"""Item verdicts: one verdict per theory item (claim, objection, test), by the item's registered
rule over all its evidence (`implicit_em.report.items`).

For each item of the registry (`protocols/items.json`):

1. each part of its quoted sentence is read from its criteria and gates, and the parts combine
   by the item's logical form and rule (`items.forms`: one working counterexample refutes a
   universal or necessity claim, one working instance answers an existential test, a
   sufficiency claim is read where all its conditions hold, a part beside the item is a
   finding and casts no vote) into `supported`/`refuted`/`mixed`/`inconclusive`/`not tested` (for an
   objection `stands`/`answered`/...), or `verified (algebra)` (`items.votes`, which states
   the rule and which criteria cast no vote: by construction, no realistic negative control,
   controls not as planted; a comparison whose rival fails its own task is undecided);
2. the same rule is read under each registered alternative (another measure, the first-stated
   threshold or measure, each data set alone); when a sound one flips the verdict (one that
   passes the same controls as the primary; a by-construction or uncontrolled alternative is
   shown and flips nothing), the item reads `fragile`, naming it (`items.alternatives`), unless a failed requirement holds it open (a
   criterion that votes `undecided` because its runs did not converge): no alternative closes
   what the requirement opened, so it keeps its `inconclusive (not converged)`, with its
   alternatives listed;
3. linked items whose confident verdicts contradict each other both read `inconsistent`, with
   the reason (`items.links`).

An item is `exploratory` when a criterion that voted on it comes from an exploratory experiment
(an amendment made after that experiment's seeds were seen), or from a measurement started
before the item rules were registered (the rules were written knowing it): its verdict stands
only once rerun on fresh seeds. It is exploratory too when one of its own measures or criteria
was changed after its data were seen (the item's `seen` in the registry) and an experiment it
reads was measured before that change: `exploratory_reason` then says what changed and what the
first-stated one read. A run started after the change (on fresh seeds) confirms the changed
measure, and the item is not exploratory for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.items.alternatives import alternative_readings
from implicit_em.report.items.links import apply_links
from implicit_em.report.items.registry import Registry, Seen, load_registry
from implicit_em.report.items.votes import (
    ALGEBRA_WORDS,
    CLAIM_WORDS,
    OBJECTION_WORDS,
    controls_pass,
    item_reading,
)

__all__ = [
    "ALGEBRA_WORDS",
    "CLAIM_WORDS",
    "FRAGILE",
    "OBJECTION_WORDS",
    "claim_verdicts",
    "controls_pass",
    "verdict_label",
]

FRAGILE = "fragile"


def verdict_label(entry: Mapping[str, Any]) -> str:
    """An item's verdict as shown: the word, and its qualifier in parentheses when it has one
    (`not tested (no realistic negative control)`, `fragile (under wine alone: refuted)`)."""
    qualifier = entry.get("qualifier")
    return f"{entry['verdict']} ({qualifier})" if qualifier else entry["verdict"]


def _unregistered(item: str) -> dict[str, Any]:
    return {
        "verdict": OBJECTION_WORDS[4] if item[0] in "Rm" else CLAIM_WORDS[4],
        "qualifier": "no registered rule",
        "reason": "the item registry has no entry for it",
        "parts": [],
        "decided_by": [],
    }


def _exploratory_reasons(
    item_seen: Sequence[Seen],
    evidence: Sequence[Mapping[str, Any]],
    by_id: Mapping[str, Mapping[str, Any]],
    registry: Registry,
) -> list[str]:
    """Why an item is exploratory (empty: it is not): each of its measures changed after its
    data were seen, unless every experiment it reads was measured after the change (on fresh
    seeds: the measurement confirms the changed measure), and each voting criterion's
    experiment that is exploratory or was measured before the item rules were registered."""
    voting = list(dict.fromkeys(c["experiment"] for c in evidence if c["vote"] != "no vote"))
    read = list(dict.fromkeys(c["experiment"] for c in evidence)) or voting
    reasons = [
        f"changed after its data were seen: {s.text}"
        for s in item_seen
        if any(_started_before(by_id.get(ident, {}), s.date) for ident in read)
    ]
    for ident in voting:
        e = by_id.get(ident, {})
        if e.get("exploratory"):
            reasons.append(f"{ident} is exploratory")
        elif registry.set_after(e.get("started")):
            reasons.append(f"{ident} was measured before the item rules were registered")
    return reasons


def _started_before(experiment: Mapping[str, Any], date: str) -> bool:
    """Whether `experiment` was measured before `date` (to the minute, both UTC), or when is not
    recorded (a result without a start counts as before)."""
    started = experiment.get("started")
    return not started or str(started)[:16] < date[:16]


def _held_open(evidence: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a failed requirement holds the item open: a criterion whose standing is what one
    of its `requires` says (`not converged`) and which therefore votes `undecided`."""
    return any(c.get("held_open") for c in evidence)


def claim_verdicts(
    items: Sequence[str],
    experiments: Sequence[Mapping[str, Any]],
    registry: Registry | None = None,
) -> list[dict[str, Any]]:
    """One verdict per theory item of `items`, read from the results.json `experiments` (`id`,
    `verdict`, `criteria` with their item marks, `gates`, `numbers`, `samples`) by the rules
    of `registry` (the package's `items.json` when None).

    Each entry has `verdict` (after robustness and links), `reading` (the verdict by the rule
    alone), `qualifier` and `reason`, `form` and `form_why`, `rule` (its text), `parts` (each
    with its reading and its criteria's standings and votes; those `beside` the item are
    findings), `decided_by`, `alternatives` (the verdict under each) and `fragile_under`,
    `links`, `evidence` (the criterion readings of the parts that decide, for the forest plot),
    `experiments`, `excluded`, `exploratory` and `exploratory_reason`.
    """
    registry = registry or load_registry()
    by_id = {e["id"]: e for e in experiments}
    index = {(e["id"], c["number"]): c for e in experiments for c in e.get("criteria", [])}
    results: dict[str, dict[str, Any]] = {}
    for ident in items:
        item = registry.items.get(ident)
        if item is None:
            base, alternatives, rule = _unregistered(ident), [], ""
        else:
            base = item_reading(item, index, by_id)
            alternatives = alternative_readings(item, index, by_id, base["verdict"])
            rule = item.rule_text
        flips = [a for a in alternatives if a["flips"]]
        voting = [p for p in base["parts"] if not p.get("beside")]
        evidence = [c for p in voting for c in p["criteria"]]
        named = [
            *(c["experiment"] for p in base["parts"] for c in p["criteria"]),
            *(g["experiment"] for p in base["parts"] for g in p["gates"]),
        ]
        ids = list(dict.fromkeys(named))
        seen = list(item.seen) if item is not None else []
        reasons = _exploratory_reasons(seen, evidence, by_id, registry)
        results[ident] = {
            "id": ident,
            **base,
            "reading": base["verdict"],
            "form": item.form if item is not None else None,
            "form_why": item.form_why if item is not None else "",
            "rule": rule,
            "alternatives": alternatives,
            "fragile_under": [a["id"] for a in flips],
            "links": [],
            "evidence": evidence,
            "experiments": ids,
            "excluded": [
                {"experiment": i, "verdict": by_id[i]["verdict"]}
                for i in ids
                if i in by_id and by_id[i]["verdict"] in ("invalid", "not run")
            ],
            "exploratory": bool(reasons),
            "exploratory_reason": "; ".join(reasons),
        }
        if flips and not _held_open(evidence):
            results[ident]["verdict"] = FRAGILE
            results[ident]["qualifier"] = "under " + "; ".join(
                f"{a['id']}: {a['verdict']}" for a in flips
            )
    apply_links(results, registry.links)
    return [results[i] for i in items]

"""Gates, criteria on intervals over seeds, verdicts, and the experiment list (item verdicts:
`test_item_verdicts.py`)."""

from __future__ import annotations

import math

import pytest

from implicit_em.report import Criterion, Experiment, Gate, Outcome, Rule, select
from implicit_em.report.experiments import MODULES
from implicit_em.report.judging.rule import Evaluation

LOW = Criterion("deviation", "<=", 0.1, "the paths agree", claim="C4", direction="supports")
SHARE = Criterion(
    "agree", ">=", 0.5, "most runs agree", claim="R1", direction="refutes", method="wilson"
)
GATE = Gate("identity_error", "<=", 1e-12, "the identity holds")
RULE = Rule((LOW, SHARE), (GATE,))
OK = {"identity_error": 0.0}


def test_holds_partly_fails_on_intervals():
    met = {"deviation": [0.01, 0.02, 0.015, 0.01], "agree": [1.0] * 20}
    not_met = {"deviation": [0.5, 0.6, 0.55, 0.52], "agree": [0.0] * 20}
    assert RULE.judge(OK, met).verdict == "holds"
    assert RULE.judge(OK, not_met).verdict == "fails"
    partly = RULE.judge(OK, {**met, "agree": not_met["agree"]})
    assert partly.verdict == "partly"
    assert "agree" in partly.reason and "Wilson" in partly.reason


def test_undecided_resolved_both_ways():
    wide = [0.0, 0.2]  # mean 0.1, a t interval far across the threshold
    # the other criterion not met: undecided gives partly or fails -> inconclusive
    judgement = RULE.judge(OK, {"deviation": wide, "agree": [0.0] * 20})
    assert judgement.verdict == "inconclusive"
    assert "deviation" in judgement.reason and "seeds" in judgement.reason
    # a single seed has no interval: undecided
    assert RULE.judge(OK, {"deviation": [0.01], "agree": [0.0] * 20}).verdict == "inconclusive"
    # NaN samples are undecided, not dropped
    nan = RULE.judge(OK, {"deviation": [0.01, math.nan, 0.02], "agree": [1.0] * 20})
    assert nan.verdict == "inconclusive"
    # one criterion only: undecided cannot be resolved
    single = Rule((LOW,))
    assert single.judge({}, {"deviation": wide}).verdict == "inconclusive"


def test_undecided_that_cannot_change_the_verdict_is_not_inconclusive():
    # With two criteria one met and one not, the third undecided leaves "partly" either way.
    third = Criterion("x", ">", 0.0, "x", claim="C1", direction="supports")
    rule = Rule((LOW, SHARE, third))
    samples = {"deviation": [0.01, 0.02, 0.01], "agree": [0.0] * 20, "x": [-1.0, 1.0]}
    assert rule.judge({}, samples).verdict == "partly"


def test_gates_make_it_invalid_and_missing_samples_not_run():
    met = {"deviation": [0.01, 0.02, 0.015], "agree": [1.0] * 20}
    bad = RULE.judge({"identity_error": 1e-3}, met)
    assert bad.verdict == "invalid" and "identity_error" in bad.reason
    assert RULE.judge({}, met).verdict == "invalid"  # the gate's number is missing
    assert RULE.judge(OK, {"deviation": [0.01]}).verdict == "not run"
    shares = RULE.judge(OK, {**met, "agree": [0.5, 1.0]})
    assert shares.verdict == "not run" and "0.0/1.0" in shares.reason


def test_a_rule_of_gates_alone_holds_when_they_pass():
    algebra = Rule((), (GATE,))
    passed = algebra.judge(OK, {})
    assert passed.verdict == "holds" and "identity_error" in passed.reason
    assert algebra.judge({"identity_error": 1e-3}, {}).verdict == "invalid"
    assert "every gate passes" in algebra.statement


def test_status_edges_and_votes():
    def status(criterion: Criterion, samples: list[float]) -> str:
        return criterion.status(criterion.interval(samples))

    at = Criterion("d", "<=", 0.5, "", claim="C1", direction="supports")
    assert status(at, [0.5, 0.5, 0.5]) == "met"  # on the threshold, <= includes it
    strict = Criterion("d", "<", 0.5, "", claim="C1", direction="supports")
    assert status(strict, [0.5, 0.5, 0.5]) == "not met"
    met = Evaluation(SHARE, SHARE.interval([1.0] * 20), "met")
    assert met.vote == "against"  # met and refutes
    assert Evaluation(LOW, None, "not met").vote == "against"
    assert Evaluation(LOW, None, "undecided").vote == "undecided"


def test_every_item_has_one_primary_and_a_number_is_primary_once():
    from implicit_em.report.rules.claims import CLAIMS

    primaries: dict[str, list[str]] = {}
    for experiment in select(None):
        for c in experiment.rule.criteria:
            if c.primary:
                primaries.setdefault(c.claim, []).append(f"{experiment.id} {c.number}")
    several = {item: p for item, p in primaries.items() if len(p) > 1}
    assert not several, f"items with more than one primary criterion: {several}"
    numbers = [p for ps in primaries.values() for p in ps]
    assert len(numbers) == len(set(numbers))
    voted = {c.claim for e in select(None) for c in e.rule.criteria}
    verified = {g.verifies for e in select(None) for g in e.rule.gates if g.verifies}
    assert voted - set(primaries) - verified == set(), "items with criteria but no primary"
    assert (set(primaries) | verified) <= set(CLAIMS)


def test_bad_declarations_raise():
    with pytest.raises(ValueError, match="op must be one of"):
        Criterion("x", "==", 1.0, "", claim="C1", direction="supports")
    with pytest.raises(ValueError, match="direction"):
        Criterion("x", "<", 1.0, "", claim="C1", direction="maybe")
    with pytest.raises(ValueError, match="method"):
        Criterion("x", "<", 1.0, "", claim="C1", direction="supports", method="z")
    with pytest.raises(ValueError, match="theory item"):
        Criterion("x", "<", 1.0, "", claim="E1", direction="supports")
    with pytest.raises(ValueError, match="at least one criterion or gate"):
        Rule(())
    experiment = _experiment()
    with pytest.raises(ValueError, match="meaning must say"):
        Experiment(**{**experiment, "meaning": {"holds": "x"}})
    with pytest.raises(ValueError, match="controls for numbers no criterion reads"):
        Experiment(**{**experiment, "controls": {"nothing": None}})


def _experiment() -> dict:
    return {
        "id": "E1",
        "title": "t",
        "claims": ("C1",),
        "hypothesis": "h",
        "setup": "s",
        "plan": lambda config: [],
        "aggregate": lambda config, results, out: Outcome({}),
        "headline": (),
        "meaning": {"holds": "a", "partly": "b", "fails": "c"},
        "minutes": {"smoke": 0, "quick": 0, "full": 0},
    }


def test_select_orders_and_rejects_unknown_ids():
    ids = [e.id for e in select(None)]
    assert ids[:5] == ["E1", "E2", "E3", "E4", "E5"]
    assert len(set(ids)) == len(MODULES) == len(ids)
    assert [e.id for e in select(["e3", " E1"])] == ["E1", "E3"]
    with pytest.raises(ValueError, match=r"unknown experiment id\(s\) E99; known: E1, E2"):
        select(["E1", "E99"])


def test_items_are_coloured_by_what_their_verdict_says_of_the_paper():
    from implicit_em.report.rules.claims import CLAIMS, FAVOURS_PAPER, direction

    assert set(FAVOURS_PAPER) == set(CLAIMS)
    assert direction("C4", "supported") == "for the paper"
    assert direction("C4", "refuted") == "against the paper"
    assert direction("R1", "stands") == "against the paper"
    assert direction("R1", "answered") == "for the paper"
    assert direction("T1", "supported") == "against the paper"  # normalization not needed
    assert direction("T3", "supported") == "for the paper"
    assert direction("C1", "verified (algebra)") == "for the paper"
    assert direction("R4", "verified (algebra)") == "against the paper"
    for verdict in ("mixed", "inconclusive", "not tested", "fragile", "inconsistent"):
        assert direction("C6", verdict) == "open"

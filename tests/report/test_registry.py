"""Rules, criteria and the registry: verdicts are computed from numbers, on both sides of each threshold."""

from __future__ import annotations

import math

import pytest

from implicit_em.report import REGISTRY, Criterion, Experiment, Outcome, Rule, select

RULE = Rule(
    (
        Criterion("deviation", "<=", 1e-10, "the paths agree"),
        Criterion("share", ">=", 0.9, "most runs agree"),
    )
)


def test_rule_holds_partly_fails():
    assert RULE.judge({"deviation": 1e-12, "share": 1.0}).verdict == "holds"
    assert RULE.judge({"deviation": 1e-10, "share": 0.9}).verdict == "holds"  # thresholds included
    partly = RULE.judge({"deviation": 1e-3, "share": 0.95})
    assert partly.verdict == "partly"
    assert "deviation = 0.001" in partly.reason and "not met" in partly.reason
    assert RULE.judge({"deviation": 1e-3, "share": 0.5}).verdict == "fails"


@pytest.mark.parametrize("value", [math.nan, math.inf, None, "0.1", True])
def test_unmeasured_number_is_not_run(value):
    judgement = RULE.judge({"deviation": value, "share": 1.0})
    assert judgement.verdict == "not run"
    assert "deviation" in judgement.reason


def test_missing_number_is_not_run():
    assert RULE.judge({"share": 1.0}).verdict == "not run"


def test_strict_operators():
    rule = Rule((Criterion("x", "<", 1.0, "below one"),))
    assert rule.judge({"x": 0.999}).verdict == "holds"
    assert rule.judge({"x": 1.0}).verdict == "fails"
    assert "holds if x < 1" in rule.statement


def test_bad_declarations_raise():
    with pytest.raises(ValueError, match="op must be one of"):
        Criterion("x", "==", 1.0, "")
    with pytest.raises(ValueError, match="at least one criterion"):
        Rule(())
    experiment = REGISTRY_EXAMPLE()
    with pytest.raises(ValueError, match="configs must have exactly the sizes"):
        Experiment(**{**experiment, "configs": {"quick": {}}})
    with pytest.raises(ValueError, match="meaning must say"):
        Experiment(**{**experiment, "meaning": {"holds": "x"}})


def REGISTRY_EXAMPLE() -> dict:
    return {
        "id": "X1",
        "title": "t",
        "claims": ("C1",),
        "hypothesis": "h",
        "setup": "s",
        "rule": RULE,
        "run": lambda config, out: Outcome({}),
        "configs": {"smoke": {}, "quick": {}, "full": {}},
        "headline": (),
        "meaning": {"holds": "a", "partly": "b", "fails": "c"},
        "minutes": {"smoke": 0, "quick": 0, "full": 0},
    }


def test_select_orders_and_rejects_unknown_ids():
    experiments = select(None)
    ids = [e.id for e in experiments]
    assert ids[:5] == ["E1", "E2", "E3", "E4", "E5"]
    assert [e.id for e in select(["e3", " E1"])] == ["E1", "E3"]
    with pytest.raises(ValueError, match=r"unknown experiment id\(s\) E99; known: E1, E2"):
        select(["E1", "E99"])


def _meeting(criterion: Criterion) -> float:
    """A value that meets ``criterion`` at (or just inside) its threshold."""
    t = criterion.threshold
    step = max(abs(t), 1.0) * 1e-6
    return {"<=": t, ">=": t, "<": t - step, ">": t + step}[criterion.op]


def _breaking(criterion: Criterion) -> float:
    """A value just outside ``criterion``'s threshold."""
    t = criterion.threshold
    step = max(abs(t), 1.0) * 1e-3
    return {"<=": t + step, "<": t, ">=": t - step, ">": t}[criterion.op]


@pytest.mark.parametrize("experiment_id", [e.id for e in select(None)])
def test_every_registered_rule_on_both_sides_of_each_threshold(experiment_id):
    """For every experiment: all criteria met -> holds; each one broken alone -> partly (or fails)."""
    rule = REGISTRY[experiment_id].rule
    meeting = {c.number: _meeting(c) for c in rule.criteria}
    assert rule.judge(meeting).verdict == "holds"
    for criterion in rule.criteria:
        broken = rule.judge({**meeting, criterion.number: _breaking(criterion)})
        expected = "fails" if len(rule.criteria) == 1 else "partly"
        assert broken.verdict == expected, (criterion, broken)
        assert criterion.number in broken.reason
    all_broken = {c.number: _breaking(c) for c in rule.criteria}
    assert rule.judge(all_broken).verdict == "fails"

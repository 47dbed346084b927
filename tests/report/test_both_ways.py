"""The judge: every listed experiment's rule can both hold and fail, and every gate is evaluated.

For each experiment, synthetic per-seed samples are built on the right side of every criterion
(-> holds) and on the wrong side (-> fails), with every gate's number at a passing value; then
each gate alone is broken (-> invalid). This tests the judge (a threshold an interval cannot
clear fails here), not the measurement: that each criterion's measurement can come out either
way is what its known-answer controls show (`test_controls.py`). An experiment of gates alone
(E1) holds when they pass.
"""

from __future__ import annotations

import pytest

from implicit_em.report import Criterion, Gate, select
from implicit_em.report.judging.rule import STATUSES

SEEDS = 200  # enough independent units for any interval to clear a threshold that can be cleared


def _samples(criterion: Criterion, meet: bool) -> list[float]:
    """Per-seed values wholly on the right (`meet`) or the wrong side of `criterion`, inside
    its declared bounds."""
    above = (criterion.op in (">=", ">")) == meet
    t = criterion.threshold
    if criterion.method in ("wilson", "clopper-pearson"):
        return [1.0 if above else 0.0] * SEEDS
    low, high = criterion.limits
    margin = min(max(abs(t), 1.0) * 0.5, ((high - t) if above else (t - low)) * 0.5)
    centre = t + margin if above else t - margin
    return [centre + margin * 0.01 * ((i % 7) - 3) for i in range(SEEDS)]


def _keyed(criterion: Criterion, values: list[float]) -> dict[str, list[float]]:
    """`values` under the criterion's sample key: one list per data set (two) when it combines
    data sets, else one list."""
    if criterion.combine:
        return {f"{criterion.number}@{name}": values for name in ("first", "second")}
    return {criterion.number: values}


def _passing(gate: Gate) -> float:
    t = gate.threshold
    return {"<=": t, ">=": t, "==": t, "<": t - 1.0, ">": t + 1.0}[gate.op]


def _failing(gate: Gate) -> float:
    t = gate.threshold
    step = max(abs(t), 1.0)
    return {"<=": t + step, "<": t, ">=": t - step, ">": t, "==": t + step}[gate.op]


@pytest.mark.parametrize("experiment", select(None), ids=lambda e: e.id)
def test_rule_can_hold_and_fail(experiment):
    rule = experiment.rule
    numbers = {g.number: _passing(g) for g in rule.gates}
    holds = {k: v for c in rule.criteria for k, v in _keyed(c, _samples(c, True)).items()}
    fails = {k: v for c in rule.criteria for k, v in _keyed(c, _samples(c, False)).items()}
    assert rule.judge(numbers, holds).verdict == "holds", rule.judge(numbers, holds).reason
    if not rule.criteria:
        return  # gates alone: nothing could fail but a gate (test_every_gate_is_evaluated)
    assert rule.judge(numbers, fails).verdict == "fails", rule.judge(numbers, fails).reason
    for evaluation in rule.evaluate(holds):
        assert evaluation.status == "met"
    for evaluation in rule.evaluate(fails):
        assert evaluation.status == "not met"
        assert evaluation.status in STATUSES


@pytest.mark.parametrize("experiment", select(None), ids=lambda e: e.id)
def test_every_gate_is_evaluated(experiment):
    rule = experiment.rule
    numbers = {g.number: _passing(g) for g in rule.gates}
    holds = {k: v for c in rule.criteria for k, v in _keyed(c, _samples(c, True)).items()}
    results = rule.gate_results(numbers)
    assert [r.gate for r in results] == list(rule.gates)
    assert all(r.passed for r in results)
    for gate in rule.gates:
        broken = rule.judge({**numbers, gate.number: _failing(gate)}, holds)
        assert broken.verdict == "invalid" and gate.number in broken.reason


@pytest.mark.parametrize("experiment", select(None), ids=lambda e: e.id)
def test_every_criterion_is_declared_fully(experiment):
    for criterion in experiment.rule.criteria:
        assert criterion.how_it_could_fail, f"{experiment.id} {criterion.number}"
        assert criterion.number not in {g.number for g in experiment.rule.gates}

"""Every criterion of the claims report earns its vote with two known-answer controls.

Each control is an input whose answer is known (a planted effect, or its absence), measured by the
experiment's own code at the protocol's `control` size and judged by the criterion itself: the
positive control must come out `met` and the negative `not met`. A criterion without both fails
here.
"""

from __future__ import annotations

import pytest

from implicit_em.report import select
from implicit_em.report.judging.controls import control_statuses

# Controls that take tens of seconds: E16's fit the field's rivals (crowd-kit's GLAD among them)
# at its quick size, the size at which the report itself runs them beside the quick units; E9's
# top-k part trains 24 small transformers.
SLOW = {"E16", "E9:specialized_topk"}

CASES = [
    pytest.param(
        experiment,
        criterion,
        id=f"{experiment.id}-{criterion.claim}-{criterion.number}",
        marks=[pytest.mark.slow]
        if {experiment.id, f"{experiment.id}:{criterion.number}"} & SLOW
        else [],
    )
    for experiment in select(None)
    for criterion in experiment.rule.criteria
]


@pytest.mark.parametrize(("experiment", "criterion"), CASES)
def test_known_answer_controls_come_out_as_planted(experiment, criterion):
    controls = experiment.controls.get(criterion.number)
    assert controls is not None, (
        f"{experiment.id}: criterion {criterion.number} has no known-answer controls; "
        "give it a positive and a negative control, or make it a gate"
    )
    config = {**experiment.configs["control"], "device": "cpu"}
    statuses = control_statuses(criterion, controls, config)
    assert statuses["positive"] == "met", (
        f"positive control ({controls.positive.says}) gave {statuses['positive_values']}"
    )
    assert statuses["negative"] == "not met", (
        f"negative control ({controls.negative.says}) gave {statuses['negative_values']}"
    )

"""Readings: one interval per data set, combined by the criterion's rule; zero-width intervals
read as gates (degenerate) that cast no vote; declared modes on the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from implicit_em.report import select
from implicit_em.report.items.registry import Ref
from implicit_em.report.items.votes import criterion_reading
from implicit_em.report.judging.readings import (
    Reading,
    combined_status,
    measured_text,
    per_data_set,
)
from implicit_em.report.judging.rule import Criterion, Rule
from implicit_em.report.judging.stats import Interval

LOW = Criterion("residual", "<=", 0.1, "small", claim="R1", direction="refutes", combine="all")
SPREAD = [0.01, 0.02, 0.03, 0.015, 0.025, 0.02, 0.01, 0.03, 0.02, 0.015]
HIGH = [0.5, 0.6, 0.55, 0.52, 0.58, 0.61, 0.5, 0.57, 0.53, 0.56]
STRADDLE = [0.0, 0.3, 0.05, 0.2, 0.01, 0.15, 0.02, 0.12, 0.0, 0.18]


def _reading(status: str) -> Reading:
    """A reading of `status`; "passes" and "fails" are degenerate readings and their gate."""
    interval = Interval(0.0, 0.0, 0.0, "t", 10)
    if status in ("passes", "fails"):
        return Reading("", interval, "degenerate", (), status == "passes")
    return Reading("", interval, status)


@pytest.mark.parametrize(
    ("statuses", "combined"),
    [
        (["met", "met"], "met"),
        (["met", "not met"], "not met"),
        (["not met", "not met"], "not met"),
        (["met", "undecided"], "undecided"),
        (["undecided", "not met"], "not met"),
        (["met", "passes"], "met"),
        (["met", "fails"], "not met"),
        (["passes", "passes"], "degenerate"),
        (["passes", "fails"], "degenerate"),
    ],
)
def test_all_is_a_conjunction_over_data_sets(statuses, combined):
    assert combined_status([_reading(s) for s in statuses], "all") == combined


def test_each_data_set_gets_its_own_interval():
    samples = {"residual@synthetic": SPREAD, "residual@wine": HIGH}
    (evaluation,) = Rule((LOW,)).evaluate(samples)
    assert [(r.label, r.status, r.interval.n) for r in evaluation.readings] == [
        ("synthetic", "met", 10),
        ("wine", "not met", 10),
    ]
    assert evaluation.status == "not met"
    assert evaluation.interval == evaluation.readings[1].interval  # the deciding data set
    assert Rule((LOW,)).judge({}, samples).verdict == "fails"
    both = {"residual@synthetic": SPREAD, "residual@wine": SPREAD}
    assert Rule((LOW,)).judge({}, both).verdict == "holds"
    # pooled under the bare number, a combining criterion finds nothing to read
    assert Rule((LOW,)).judge({}, {"residual": SPREAD + HIGH}).verdict == "not run"


def test_undecided_data_set_gives_seeds_per_data_set():
    (evaluation,) = Rule((LOW,)).evaluate({"residual@a": SPREAD, "residual@b": STRADDLE})
    assert evaluation.status == "undecided"
    assert evaluation.seeds_needed is not None and evaluation.seeds_needed > 10


def test_per_data_set_splits_by_label():
    split = per_data_set({"x": [1, 2, 3, 4]}, ["a", "b", "a", "b"])
    assert split == {"x@a": [1.0, 3.0], "x@b": [2.0, 4.0]}
    with pytest.raises(ValueError, match="x: 3 values for 4"):
        per_data_set({"x": [1, 2, 3]}, ["a", "b", "a", "b"])


ZERO = Criterion("dead", "<=", 0.05, "none dead", claim="C14a", direction="supports", primary=True)


def test_a_zero_width_interval_is_a_gate_without_a_vote():
    (evaluation,) = Rule((ZERO,)).evaluate({"dead": [0.0] * 10})
    assert evaluation.status == "degenerate" and not evaluation.failed_gates
    judgement = Rule((ZERO,)).judge({}, {"dead": [0.0] * 10})
    assert judgement.verdict == "holds"
    assert "degenerate (all seeds equal 0, n = 10): a gate, passes" in judgement.reason
    entry = {"id": "E6", "verdict": judgement.verdict, "gates": []}
    entry["criteria"] = [
        {**evaluation.as_dict(), "controls": {"positive": "met", "negative": "not met"}}
    ]
    negative = {"kind": "realistic", "removes": "the volume term"}
    marked = {**entry["criteria"][0], "negative_control": negative}
    reading = criterion_reading(Ref("E6", "dead"), {("E6", "dead"): marked}, {"E6": entry})
    assert (reading["standing"], reading["vote"]) == ("degenerate", "no vote")
    counted = {**marked, "status": "met"}
    assert (
        criterion_reading(Ref("E6", "dead"), {("E6", "dead"): counted}, {"E6": entry})["vote"]
        == "for"
    )  # the same criterion with an interval votes
    text = measured_text(entry["criteria"][0])
    assert text == "degenerate (all seeds equal 0): a gate, passes"


def test_a_degenerate_criterion_counts_for_the_experiment_as_its_gate():
    other = Criterion("gap", ">=", 0.0, "positive", claim="C12", direction="supports")
    gap = [0.2, 0.3, 0.25, 0.22, 0.31]
    failing = Rule((ZERO, other)).judge({}, {"dead": [1.0] * 10, "gap": gap})
    assert failing.verdict == "partly"  # a unanimous finding, not a bug: never invalid
    assert "dead = degenerate (all seeds equal 1, n = 10): a gate, FAILS" in failing.reason
    assert Rule((ZERO, other)).judge({}, {"dead": [0.0] * 10, "gap": gap}).verdict == "holds"


def test_a_zero_width_reading_still_decides_a_control():
    """Controls are known-answer inputs: a constant planted answer is judged, not gated."""
    assert ZERO.status(ZERO.interval([0.0] * 3)) == "met"
    assert ZERO.status(ZERO.interval([1.0] * 3)) == "not met"


def test_declared_modes_are_shown_before_the_interval():
    purity = Criterion(
        "purity", ">=", 0.9, "specialises", claim="C13", direction="supports", modes_gap=0.125
    )
    values = [0.75, 0.5, 0.751, 0.749, 0.752, 0.501, 0.748, 0.502, 0.5, 0.503]
    (evaluation,) = Rule((purity,)).evaluate({"purity": values})
    text = measured_text(evaluation.as_dict())
    assert text.startswith("modes: 5 seeds at 0.5012 (0.5 to 0.503), 5 seeds at 0.75 ")
    assert "; judged on 0.6256 [" in text and "(Student t, n = 10)" in text
    plain = Criterion("purity", ">=", 0.9, "specialises", claim="C13", direction="supports")
    assert "modes" not in measured_text(Rule((plain,)).evaluate({"purity": values})[0].as_dict())


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError, match="combine"):
        Criterion("x", "<", 1.0, "", claim="C1", direction="supports", combine="any")
    with pytest.raises(ValueError, match="modes_gap"):
        Criterion("x", "<", 1.0, "", claim="C1", direction="supports", modes_gap=0.0)
    with pytest.raises(ValueError, match="method"):
        Criterion("x", "<", 1.0, "", claim="C1", direction="supports", method="wilcoxon")


def test_the_guide_names_every_method_a_protocol_uses():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "report.md").read_text("utf-8")
    section = guide.split("## Statistics", 1)[1].split("\n## ", 1)[0]
    used = {c.method for e in select(None) for c in e.rule.criteria}
    for method in used:
        assert f"| `{method}` (" in section, method

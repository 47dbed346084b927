"""E18: the confidence readings and ECE against hand computations, a smoke run, the controls."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em.report import select
from implicit_em.report.experiments import _closed_world as cw
from implicit_em.report.experiments import e18_closed_world as e18
from implicit_em.report.experiments._neural import expected_calibration_error
from implicit_em.report.judging.controls import status_of
from implicit_em.report.rules.protocol import load_protocol
from implicit_em.report.running.plan import compute

(E18,) = select(["E18"])
PROTOCOL = load_protocol("E18")


def test_ece_over_fifteen_bins_matches_a_hand_computation():
    # Bins of width 1/15: 0.95 falls in the last bin, 0.62 in (9/15, 10/15], 0.3 in (4/15, 5/15].
    confidence = torch.tensor([0.95, 0.95, 0.62, 0.62, 0.3])
    correct = torch.tensor([True, False, True, True, False])
    # |0.5 - 0.95| * 2/5 + |1 - 0.62| * 2/5 + |0 - 0.3| * 1/5
    hand = 0.45 * 0.4 + 0.38 * 0.4 + 0.3 * 0.2
    assert expected_calibration_error(confidence, correct, bins=cw.ECE_BINS) == pytest.approx(hand)


def test_ece_separates_what_fifteen_bins_separate():
    # 0.61 and 0.66 share a bin of ten ((0.6, 0.7]) but not of fifteen ((0.6, 0.667] vs (0.667, 0.733]).
    confidence = torch.tensor([0.61, 0.68])
    correct = torch.tensor([True, False])
    fifteen = expected_calibration_error(confidence, correct, bins=15)
    ten = expected_calibration_error(confidence, correct, bins=10)
    assert fifteen == pytest.approx((0.39 + 0.68) / 2)
    assert ten == pytest.approx(abs(0.5 - 0.645))


def test_max_probability_reads_softmax_or_the_largest_sigmoid():
    z = torch.tensor([[2.0, 0.0, -1.0], [-3.0, -3.0, -3.0]], dtype=torch.float64)
    softmax = cw.max_probability("softmax")(z)
    assert softmax[0] == pytest.approx(math.exp(2) / (math.exp(2) + 1 + math.exp(-1)))
    assert softmax[1] == pytest.approx(1 / 3)
    assert torch.equal(cw.max_probability("distance")(z), softmax)
    sigmoid = cw.max_probability("sigmoid")(z)
    assert sigmoid.tolist() == pytest.approx([1 / (1 + math.exp(-2)), 1 / (1 + math.exp(3))])
    with pytest.raises(ValueError, match="kind must be one of"):
        cw.max_probability("cosine")


@settings(max_examples=40, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=2, max_size=8, unique=True),
    margin=st.floats(0.0, 10.0),
)
def test_forced_softmax_is_its_closed_form_whatever_the_logits(logits, margin):
    z = torch.tensor([logits], dtype=torch.float64)
    k = len(logits)
    forced = cw.forced_softmax(margin)(z)
    assert float(forced) == pytest.approx(1 / (1 + (k - 1) * math.exp(-margin)))


def test_confidence_reading_counts_the_threshold_as_confident():
    reading = cw.confidence_reading(torch.tensor([0.9, 0.5, 0.95, 0.89]))
    assert reading["share"] == pytest.approx(0.5)
    assert reading["mean"] == pytest.approx((0.9 + 0.5 + 0.95 + 0.89) / 4)


def test_the_protocol_reads_every_criterion_and_controls_each():
    numbers = {c.number for c in PROTOCOL.criteria}
    assert numbers == set(e18.readings()) == set(e18.CONTROLS)
    for criterion in PROTOCOL.data["criteria"]:
        assert criterion["negative_control"]["kind"] == "realistic"
        assert criterion["baseline"]["gates"]


def test_a_smoke_run_reads_the_gaps_from_the_heads(tmp_path):
    config = {**PROTOCOL.sizes["smoke"], "device": "cpu"}
    results = {unit.name: compute(unit).value for unit in E18.plan(config)}
    outcome = E18.aggregate(config, results, tmp_path)
    assert set(outcome.samples) == {c.number for c in PROTOCOL.criteria}
    (seed,) = config["seeds"]
    head = {k: results[f"{k}-seed{seed}"] for k in config["heads"]}
    for where in ("near", "far"):
        gap = head["softmax"][where]["mean"] - head["sigmoid"][where]["mean"]
        assert outcome.samples[f"confidence_gap_{where}"] == [pytest.approx(gap)]
    assert outcome.samples["confident_share_softmax_far"] == [head["softmax"]["far"]["share"]]
    assert outcome.numbers["share_near_softmax"] == head["softmax"]["near"]["share"]  # shown
    for kind in config["heads"]:
        assert 0 <= outcome.numbers[f"ece_{kind}"] <= 1
        assert outcome.numbers[f"accuracy_{kind}"] > 1 / PROTOCOL.sizes["smoke"]["known"]
        # a softmax over K classes never gives its top class less than 1/K
        if kind != "sigmoid":
            assert outcome.numbers[f"mean_near_{kind}"] >= 1 / config["known"]


@pytest.mark.slow
def test_the_positive_controls_come_out_as_planted():
    """The positives plant the effect (scaled inputs, a softmax forced by its margin); the
    realistic negatives are trained sigmoid heads, read and reported but not asserted here."""
    config = {**PROTOCOL.sizes["control"], "device": "cpu"}
    for criterion in PROTOCOL.criteria:
        values = e18.CONTROLS[criterion.number].positive.measure(config)
        assert status_of(criterion, values) == "met", criterion.number

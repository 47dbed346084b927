"""E18: the confidence readings and ECE against hand computations, a smoke run, the controls."""

from __future__ import annotations

import math

import pytest
import torch

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


def test_the_null_head_confidence_is_the_largest_known_class_share_of_k_plus_one():
    # Columns: two known classes, then the null's logit -d0.
    z = torch.tensor([[2.0, 0.0, 1.0], [0.0, 0.0, 5.0]], dtype=torch.float64)
    null = cw.max_probability("null")(z)
    total = torch.exp(z).sum(-1)
    assert null.tolist() == pytest.approx([math.exp(2) / float(total[0]), 1 / float(total[1])])
    # A plain softmax over the known columns alone would give the second row 0.5.
    assert float(cw.max_probability("softmax")(z[1:, :2])) == pytest.approx(0.5)


def test_head_logits_append_the_null_only_to_a_null_head():
    from implicit_em.report.experiments._open_set import OpenSetClassifier

    torch.manual_seed(0)
    x = torch.randn(5, 7)
    plain = OpenSetClassifier("distance", 7, 8, 3, 4, d0=0.0)
    null = OpenSetClassifier("null", 7, 8, 3, 4, d0=2.5)
    assert cw.head_logits(plain, x).shape == (5, 4)
    z = cw.head_logits(null, x)
    assert z.shape == (5, 5) and torch.allclose(z[:, -1], torch.full((5,), -2.5, dtype=z.dtype))


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


def test_a_smoke_run_reads_the_shares_and_shows_the_gaps(tmp_path):
    config = {**PROTOCOL.sizes["smoke"], "device": "cpu"}
    results = {unit.name: compute(unit).value for unit in E18.plan(config)}
    outcome = E18.aggregate(config, results, tmp_path)
    assert set(outcome.samples) == {c.number for c in PROTOCOL.criteria}
    (seed,) = config["seeds"]
    head = {k: results[f"{k}-seed{seed}"] for k in config["heads"]}
    for where in ("near", "far"):
        gap = head["softmax"][where]["mean"] - head["sigmoid"][where]["mean"]
        assert outcome.numbers[f"confidence_gap_{where}"] == pytest.approx(gap)  # shown
        for kind in e18.JUDGED:
            share = head[kind][where]["share"]
            assert outcome.samples[f"confident_share_{kind}_{where}"] == [share]
        # The null head keeps less than all its mass on the known classes.
        assert 0 < outcome.numbers[f"known_mass_{where}_null"] < 1
    assert outcome.numbers["sum_to_one_error"] <= 1e-12
    for kind in config["heads"]:
        assert 0 <= outcome.numbers[f"ece_{kind}"] <= 1
        assert outcome.numbers[f"accuracy_{kind}"] > 1 / PROTOCOL.sizes["smoke"]["known"]
        # a softmax over K classes never gives its top class less than 1/K
        if kind in cw.NORMALIZED:
            assert outcome.numbers[f"mean_near_{kind}"] >= 1 / config["known"]
            assert outcome.numbers[f"known_mass_near_{kind}"] == pytest.approx(1.0)
    assert E18.judge(outcome).verdict not in ("not run", "invalid")


@pytest.mark.slow
def test_the_positive_controls_come_out_as_planted():
    """The positives plant the effect (inputs scaled far out along the known classes); the
    realistic negative, the head that can abstain, is asserted in `test_controls`."""
    config = {**PROTOCOL.sizes["control"], "device": "cpu"}
    for criterion in PROTOCOL.criteria:
        values = e18.CONTROLS[criterion.number].positive.measure(config)
        assert status_of(criterion, values) == "met", criterion.number

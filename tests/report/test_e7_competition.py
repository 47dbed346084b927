"""E7: responsibilities and wrong-class updates read from the gradient, calibration, the rule."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import spearmanr

from implicit_em.core import responsibilities
from implicit_em.objectives import cross_entropy
from implicit_em.report import select
from implicit_em.report.experiments import _prototypes
from implicit_em.report.experiments import _smoothing_controls as sc
from implicit_em.report.experiments._neural import expected_calibration_error, spearman_rows

(E7,) = select(["E7"])


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_competition_matches_autograd(smoothing):
    torch.manual_seed(1)
    b, k, f = 12, 5, 3
    h = torch.randn(b, f, dtype=torch.float64)
    prototypes = torch.randn(k, f, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, k, (b,))
    d = ((h[:, None, :] - prototypes[None]) ** 2).sum(-1)
    d.retain_grad()
    cross_entropy(d, labels, label_smoothing=smoothing).backward()
    c = _prototypes.competition(d.grad, h, prototypes.detach(), labels, smoothing)
    # The responsibilities read from the gradient are the forward softmax (C1, R4).
    assert torch.allclose(c["r"], responsibilities(d.detach()), atol=1e-12)
    # u_j: autograd of the loss's wrong-class part alone, with its gradient held fixed.
    wrong = torch.ones(b, k, dtype=torch.bool).scatter(1, labels[:, None], False)
    weights = torch.where(wrong, d.grad, torch.zeros_like(d.grad))
    p = prototypes.detach().clone().requires_grad_(True)
    (weights * ((h[:, None, :] - p[None]) ** 2).sum(-1)).sum().backward()
    assert torch.allclose(c["U"], p.grad.norm(dim=1), atol=1e-12)
    r = responsibilities(d.detach())
    assert torch.allclose(c["R"], torch.where(wrong, r, torch.zeros_like(r)).sum(0), atol=1e-12)
    expected = spearmanr(c["R"].numpy(), c["U"].numpy()).statistic
    assert float(c["batch_rho"]) == pytest.approx(expected, abs=1e-12)


def test_spearman_rows_against_scipy():
    torch.manual_seed(0)
    a, b = torch.randn(7, 9), torch.randn(7, 9)
    rho = spearman_rows(a, b)
    for i in range(7):
        assert float(rho[i]) == pytest.approx(spearmanr(a[i], b[i]).statistic, abs=1e-6)
    assert torch.isnan(spearman_rows(torch.ones(1, 4), torch.arange(4.0)[None]))[0]
    with pytest.raises(ValueError, match="equal"):
        spearman_rows(a, b[:, :3])


def test_expected_calibration_error_by_hand():
    confidence = torch.tensor([0.95, 0.95, 0.55, 0.55, 0.55, 0.05])
    correct = torch.tensor([True, False, True, True, False, False])
    # bins (0.9, 0.9667]: conf 0.95, acc 0.5; (0.5333, 0.6]: conf 0.55, acc 2/3; (0, 0.0667]: 0.05, 0
    expected = (2 * abs(0.95 - 0.5) + 3 * abs(0.55 - 2 / 3) + 1 * abs(0.05 - 0.0)) / 6
    assert expected_calibration_error(confidence, correct, bins=15) == pytest.approx(expected)
    assert expected_calibration_error(torch.ones(4), torch.ones(4, dtype=torch.bool)) == 0.0


def test_wrong_class_entropy():
    r = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.25, 0.25]], dtype=torch.float64)
    got = _prototypes.wrong_class_entropy(r, torch.tensor([0, 0]))
    assert float(got[1]) == pytest.approx(math.log(2))
    w = torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    assert float(got[0]) == pytest.approx(float(-(w * w.log()).sum()))
    # No wrong-class mass at all (as a float32 gradient can read it): no entropy, not zero.
    assert torch.isnan(
        _prototypes.wrong_class_entropy(torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([0]))
    )[0]


def test_correction_concentration_and_wrong_class_ranks():
    y = torch.tensor([0, 1])
    uniform = torch.tensor([[-0.7, 0.1, 0.1, 0.1], [0.2, -0.4, 0.2, 0.0]], dtype=torch.float64)
    got = _prototypes.correction_concentration(uniform, y)
    assert float(got[0]) == pytest.approx(0.0, abs=1e-12)
    assert float(got[1]) == pytest.approx(1 - math.log(2) / math.log(3))
    ranks = _prototypes.wrong_class_ranks(torch.tensor([[5.0, 1.0, 3.0, 2.0]]), torch.tensor([0]))
    assert ranks.tolist() == [[0, 2, 1]]


def test_wrong_order_kept_is_the_smoothed_agreement_minus_the_unsmoothed_one():
    order = [[0, 1, 2], [2, 1, 0]]
    clamp = [{"wrong_order": order}, {"wrong_order": order}]
    reversed_rows = [{"wrong_order": [r[::-1] for r in order]}] * 2
    assert sc.wrong_order_kept(clamp, clamp) == pytest.approx([0.0, 0.0])
    assert sc.wrong_order_kept(reversed_rows, clamp) == pytest.approx([-2.0, -2.0])


def test_a_rival_counts_only_where_it_classifies_about_as_well():
    reference = [{"accuracy": 0.90}, {"accuracy": 0.90}]
    rival = [
        {"accuracy": 0.88, "competition": 0.01},
        {"accuracy": 0.80, "competition": 0.02},
    ]
    values = sc.working_rival_values(rival, reference, "competition")
    assert values[0] == 0.01 and math.isnan(values[1])


def test_planted_sphere_encoder_is_the_identity():
    model, images = sc.planted_sphere(0, 50)
    with torch.no_grad():
        torch.testing.assert_close(model.encoder(images.x_test), images.x_test)
    assert torch.allclose(images.x_test.norm(dim=1), torch.full((50,), sc.SPHERE_RADIUS))


def test_smoke_run(tmp_path):
    outcome = E7.run({**E7.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    for level in ("ls00", "ls30"):
        assert -1 <= n[f"rank_corr_{level}"] <= 1
        assert 0 <= n[f"ece_{level}"] <= 1 and 0 <= n[f"accuracy_{level}"] <= 1
        assert n[f"concentration_{level}"] <= 1
        assert -1 <= n[f"competition_{level}"] <= 1
    for name in ("ovr_sigmoid", "mse"):
        assert 0 <= n[f"accuracy_{name}"] <= 1 and 0 <= n[f"ece_{name}"] <= 1
        assert -1 <= n[f"competition_{name}"] <= 1
    assert n["accuracy_shortfall_ovr_sigmoid"] == pytest.approx(
        n["accuracy_ls00"] - n["accuracy_ovr_sigmoid"]
    )
    assert -1 <= n["encoder_coupling_ce"] <= 1
    assert -2 <= n["wrong_order_kept"] <= 2
    # The tracer's wrong-class entropy is the one read here from the same gradients.
    assert n["trace_agreement_max"] < 1e-3
    assert all((tmp_path / f.path).is_file() for f in outcome.figures)
    assert E7.judge(outcome).verdict not in ("not run",)
    for criterion in E7.rule.criteria:
        assert len(outcome.samples[criterion.number]) >= len(E7.configs["smoke"]["seeds"])


def test_coupling_gaps_read_only_the_seeds_where_the_comparator_learned():
    nan = float("nan")
    assert sc.learned_gaps([0.9, 0.8, 0.7], [0.1, nan, 0.2], 0.5) == pytest.approx([0.8, 0.5])
    assert all(math.isnan(g) for g in sc.learned_gaps([0.9, 0.8, 0.7], [0.1, nan, nan], 0.5))
    assert sc.learned_gaps([0.9, 0.8], [nan, 0.3], 0.5) == pytest.approx([0.5])

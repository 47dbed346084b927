"""E3's held-out comparison: the split, the energies, the two objectives and EM's reference."""

from __future__ import annotations

import math

import pytest
import torch

from implicit_em.report.experiments import _heldout_mixtures as hm
from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.experiments.e3_fixed_points import reached


def _parameters(mixture):
    u = mixture.precisions_cholesky
    return (
        torch.log(mixture.weights),
        mixture.means,
        torch.log(torch.diagonal(u, dim1=-2, dim2=-1)),
        torch.triu(u, diagonal=1),
    )


def test_split_holds_out_the_stated_share_of_distinct_rows():
    data = mx.synthetic(100, 0)
    train, test = hm.split(data, 3, 0.3)
    assert (len(train), len(test)) == (70, 30)
    rows = {tuple(r.tolist()) for r in torch.cat([train, test])}
    assert len(rows) == 100
    with pytest.raises(ValueError, match="test_share"):
        hm.split(data, 3, 1.0)


def test_energies_give_the_mixture_log_likelihood():
    data = mx.synthetic(200, 1)
    mixture = hm.true_start()
    e = hm.energies(data.x, *_parameters(mixture))
    nll = float(-torch.logsumexp(-e, dim=1).mean())
    assert nll == pytest.approx(-mx.mean_log_likelihood(mixture, data.x), abs=1e-10)


def test_without_the_normalisation_every_component_fits_every_row():
    data = mx.synthetic(300, 2)
    start = mx.poor_start(data, 2)
    fitted, trace = hm.fit_by_gradient("independent", data.x, start, 0.1, 2000, 0.0)
    assert trace[-1] < trace[0]
    for j in range(3):
        torch.testing.assert_close(fitted.means[j], data.x.mean(0), atol=1e-3, rtol=0)
        torch.testing.assert_close(
            fitted.covariances[j], torch.cov(data.x.T, correction=0), atol=1e-3, rtol=0
        )
    with pytest.raises(ValueError, match="objective must be one of"):
        hm.fit_by_gradient("max", data.x, start, 0.1, 5, 0.0)


def test_em_reference_and_the_gradient_fit_agree_from_the_generating_parameters():
    config = {
        "heldout_test_share": 0.3,
        "em_tolerance": 1e-8,
        "em_max_iter": 1000,
        "em_reg_covar": 1e-6,
        "heldout_learning_rate": 0.1,
        "heldout_steps": 600,
        "heldout_plateau": 1e-6,
    }
    data = mx.synthetic(400, 5)
    out = hm.heldout_comparison(data, 5, config, hm.OBJECTIVES, hm.true_start())
    assert out["em_converged"]
    assert out["em"] > out["one_gaussian"] + 0.3
    assert abs(out["gap_lse"]) < 1e-3
    assert out["gd_independent"] == pytest.approx(out["one_gaussian"], abs=1e-3)


def test_a_run_reaches_em_within_the_margin_or_above():
    assert reached([0.0, -0.005, -0.02, 0.3, -math.inf], 0.01) == [1.0, 1.0, 0.0, 1.0, 0.0]

"""EM against scikit-learn, and the preconditioned rule against EM, from the same start."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from implicit_em.mixture import GaussianMixture
from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.parameters import Mixture, normalize
from implicit_em.mixture.step_rules import make_step_rule

TYPES = ["full", "tied", "diag", "spherical"]


def _start(x: np.ndarray, covariance_type: str) -> dict[str, np.ndarray]:
    """A deliberately poor common start: random data points as means, sklearn's covariances."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sk = SkGaussianMixture(
            4,
            covariance_type=covariance_type,
            init_params="random_from_data",
            max_iter=1,
            random_state=3,
        ).fit(x)
    rows = np.random.default_rng(5).choice(len(x), 4, replace=False)
    return {
        "weights_init": np.full(4, 0.25),
        "means_init": x[rows],
        "precisions_init": sk.precisions_,
    }


@pytest.mark.parametrize("covariance_type", TYPES)
@pytest.mark.parametrize("batch_size", [None, 97])
def test_em_matches_sklearn_log_likelihood(blobs, covariance_type, batch_size):
    _check_em_matches_sklearn(blobs, covariance_type, batch_size)


def test_em_matches_sklearn_with_full_residuals_features_last(wide_blobs):
    """From 16 features on, `full` lays its whitened residuals out features last."""
    _check_em_matches_sklearn(wide_blobs, "full", None)


def _check_em_matches_sklearn(blobs: np.ndarray, covariance_type: str, batch_size) -> None:
    start = _start(blobs, covariance_type)
    kwargs = {"covariance_type": covariance_type, "max_iter": 15, "tol": 0.0, **start}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sk = SkGaussianMixture(4, **kwargs).fit(blobs)
        ours = GaussianMixture(4, batch_size=batch_size, **kwargs).fit(blobs)
    assert ours.n_iter_ == sk.n_iter_ == 15
    assert abs(ours.lower_bound_ - sk.lower_bound_) <= 1e-6
    assert abs(ours.score(blobs) - sk.score(blobs)) <= 1e-6
    np.testing.assert_allclose(ours.score_samples(blobs), sk.score_samples(blobs), atol=1e-6)
    np.testing.assert_allclose(ours.means_, sk.means_, atol=1e-6)
    np.testing.assert_allclose(ours.covariances_, sk.covariances_, atol=1e-6)


def _rules_from(start: Mixture, fitter: str, x: torch.Tensor, steps: int) -> list[Mixture]:
    rule = make_step_rule(fitter, 1e-6, None)
    out, mixture = [], start
    for _ in range(steps):
        rule.begin(mixture)
        for chunk in x.split(128):
            rule.accumulate(chunk)
        mixture, _ = rule.step()
        out.append(mixture)
    return out


def _start_mixture(blobs, covariance_type: str) -> Mixture:
    """The parameters of :func:`_start` as a :class:`Mixture`."""
    start = _start(blobs, covariance_type)
    model = covariance_model(covariance_type)
    return Mixture.from_covariances(
        model,
        torch.tensor(start["weights_init"]),
        torch.tensor(start["means_init"]),
        model.from_precision(torch.tensor(start["precisions_init"])),
    )


@pytest.mark.parametrize("covariance_type", TYPES)
def test_preconditioned_reproduces_em_step_by_step(blobs, covariance_type):
    mixture = _start_mixture(blobs, covariance_type)
    x = torch.tensor(blobs)
    em = _rules_from(mixture, "em", x, 12)
    pre = _rules_from(mixture, "preconditioned", x, 12)
    moved = float((em[-1].means - mixture.means).abs().max())
    assert moved > 0.1  # the trajectory is not trivial
    for a, b in zip(em, pre, strict=True):
        assert float((a.means - b.means).abs().max()) <= 1e-10
        assert float((a.weights - b.weights).abs().max()) <= 1e-10
        assert float((a.covariances - b.covariances).abs().max()) <= 1e-10


def test_preconditioned_is_not_plain_gradient(blobs):
    """Sanity: the unpreconditioned step from the same start lands elsewhere."""
    mixture = _start_mixture(blobs, "diag")
    x = torch.tensor(blobs)
    em = _rules_from(mixture, "em", x, 1)[0]
    gd = _rules_from(mixture, "gd", x, 1)[0]
    assert float((em.means - gd.means).abs().max()) > 1e-3


@pytest.mark.parametrize("fitter", ["gd", "adam"])
@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_gradient_fitters_reach_em_log_likelihood(separated, fitter, covariance_type):
    common = {
        "covariance_type": covariance_type,
        "init_params": "random_from_data",
        "random_state": 0,
        "reg_covar": 1e-6,
    }
    em = GaussianMixture(3, max_iter=500, tol=1e-12, **common).fit(separated)
    start = {
        "weights_init": np.full(3, 1 / 3),
        "means_init": em.means_ + 0.7,
        "precisions_init": em.precisions_,
    }
    lr = {"gd": 0.5, "adam": 0.05}[fitter]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = GaussianMixture(
            3,
            fitter=fitter,
            learning_rate=lr,
            max_iter=3000,
            tol=1e-9,
            **{**common, **start},
        ).fit(separated)
    assert gm.n_iter_ > 20
    assert abs(gm.score(separated) - em.score(separated)) <= 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normalize_is_log_sum_exp_and_softmax_without_subnormals(dtype):
    logits = torch.tensor([[0.0, -1.0, -500.0, -2000.0], [3.0, 3.0, -90.0, -1e30]], dtype=dtype)
    log_p, r = normalize(logits.clone())
    tiny = torch.finfo(dtype).tiny
    torch.testing.assert_close(log_p, torch.logsumexp(logits, dim=1))
    torch.testing.assert_close(
        r, torch.softmax(logits, dim=1), atol=tiny**0.5 * 2, rtol=8 * torch.finfo(dtype).eps
    )
    assert bool((r >= tiny).all())
    torch.testing.assert_close(r.sum(dim=1), torch.ones(2, dtype=dtype))

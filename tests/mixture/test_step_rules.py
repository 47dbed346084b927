"""The gradient rules on raw data: steps in each component's units, an honest `converged_`,
and divergence as one error that names the learning rate."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_blobs
from sklearn.exceptions import ConvergenceWarning

from implicit_em.mixture import GaussianMixture

GRADIENT_FITTERS = ["gd", "adam"]


def _unscaled_blobs(n_rows: int, n_features: int, centers: int) -> np.ndarray:
    x, _ = make_blobs(n_rows, n_features, centers=centers, cluster_std=4.0, random_state=0)
    return x


def _fit(fitter: str, x: np.ndarray, k: int, **kwargs) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianMixture(k, fitter=fitter, random_state=0, **kwargs).fit(x)


def _em_score(x: np.ndarray, k: int, **kwargs) -> float:
    return GaussianMixture(k, random_state=0, **kwargs).fit(x).score(x)


@pytest.mark.parametrize("fitter", GRADIENT_FITTERS)
@pytest.mark.parametrize(
    "shape", [(10_000, 10, 8), pytest.param((200_000, 20, 16), marks=pytest.mark.slow)]
)
def test_defaults_fit_unscaled_blobs(fitter, shape):
    """make_blobs with a spread of 4, unscaled: converged, within 0.02 nats of EM."""
    x = _unscaled_blobs(*shape)
    gm = _fit(fitter, x, shape[2])
    assert gm.converged_
    assert abs(gm.score(x) - _em_score(x, shape[2])) <= 0.02


@pytest.mark.slow
@pytest.mark.parametrize("fitter", GRADIENT_FITTERS)
def test_defaults_fit_digits(fitter):
    """`load_digits` has constant pixels: a step in raw units diverged there. With
    `reg_covar` kept, every variance stays at least `reg_covar` and the likelihood climbs
    (slowly for `gd`, whose mean steps are each component's weight times EM's: it ends
    unconverged, and says so)."""
    x = load_digits().data
    gm = _fit(fitter, x, 10, covariance_type="diag")
    assert np.isfinite(gm.covariances_).all() and (gm.covariances_ >= 1e-6).all()
    assert gm.lower_bounds_[-1] > gm.lower_bounds_[0] + 5.0


@pytest.mark.parametrize("covariance_type", ["full", "tied", "diag", "spherical"])
def test_gd_likelihood_rises_on_digits(covariance_type):
    x = load_digits().data[:600]
    gm = _fit("gd", x, 4, covariance_type=covariance_type, max_iter=8)
    assert np.all(np.diff(gm.lower_bounds_) > -1e-9)


@pytest.mark.parametrize("fitter", GRADIENT_FITTERS)
def test_steps_are_in_the_datas_units(fitter):
    """Scaling the data scales the fit: the same passes, the likelihood shifted by
    $-D\\log c$ (with `reg_covar=0`, the one constant that does not scale)."""
    x = _unscaled_blobs(2_000, 3, 3)
    scale = 1000.0
    small = _fit(fitter, x, 3, reg_covar=0.0, max_iter=15, tol=0.0)
    large = _fit(fitter, x * scale, 3, reg_covar=0.0, max_iter=15, tol=0.0)
    shift = x.shape[1] * np.log(scale)
    np.testing.assert_allclose(np.array(large.lower_bounds_) + shift, small.lower_bounds_)
    np.testing.assert_allclose(large.means_, small.means_ * scale, rtol=1e-6)


@pytest.mark.parametrize("fitter", GRADIENT_FITTERS)
def test_short_steps_are_not_convergence(fitter):
    """At a rate of 1e-7 every pass changes the likelihood by far less than `tol`, but the
    gradient is not small: not converged, and the warning says so."""
    x = _unscaled_blobs(2_000, 3, 3)
    start = {"means_init": _fit("em", x, 3).means_ + 2.0}
    with pytest.warns(ConvergenceWarning):
        gm = GaussianMixture(
            3, fitter=fitter, learning_rate=1e-7, max_iter=5, random_state=0, **start
        ).fit(x)
    assert np.all(np.abs(np.diff(gm.lower_bounds_)) < gm.tol)
    assert not gm.converged_


def test_a_stationary_start_converges():
    x = _unscaled_blobs(2_000, 3, 3)
    em = GaussianMixture(3, tol=1e-6, max_iter=500, random_state=0).fit(x)
    start = {
        "weights_init": em.weights_,
        "means_init": em.means_,
        "precisions_init": em.precisions_,
    }
    gm = GaussianMixture(3, fitter="gd", random_state=0, **start).fit(x)
    assert gm.converged_ and gm.n_iter_ <= 3


@pytest.mark.parametrize("fitter", GRADIENT_FITTERS)
@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_divergence_is_one_line_naming_the_rate(fitter, covariance_type):
    x = _unscaled_blobs(2_000, 3, 3)
    gm = GaussianMixture(
        3, covariance_type=covariance_type, fitter=fitter, learning_rate=1e4, random_state=0
    )
    with pytest.raises(ValueError, match=r"learning_rate=10000\.0") as caught:
        gm.fit(x)
    message = str(caught.value)
    assert "\n" not in message and "lower learning_rate" in message
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None or caught.value.__suppress_context__

"""The scikit-learn estimator contract, input types, robustness and re-seeding."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.utils.estimator_checks import parametrize_with_checks

from implicit_em.mixture import GaussianMixture


@parametrize_with_checks(
    [
        GaussianMixture(),
        GaussianMixture(2, covariance_type="diag", fitter="preconditioned", batch_size=7),
        GaussianMixture(2, covariance_type="spherical", fitter="adam", max_iter=5),
    ]
)
def test_sklearn_estimator_contract(estimator, check):
    """Every check of scikit-learn's contract, none excluded."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def test_tensor_in_tensor_out_numpy_in_numpy_out(blobs):
    gm = GaussianMixture(3, random_state=0).fit(torch.tensor(blobs))
    t = torch.tensor(blobs)
    assert isinstance(gm.predict(t), torch.Tensor)
    assert isinstance(gm.predict_proba(t), torch.Tensor)
    assert isinstance(gm.score_samples(t), torch.Tensor)
    assert isinstance(gm.predict(blobs), np.ndarray)
    np.testing.assert_array_equal(gm.predict(t).numpy(), gm.predict(blobs))
    np.testing.assert_array_equal(gm.fit_predict(blobs), gm.predict(blobs))


@pytest.mark.parametrize("covariance_type", ["full", "tied", "diag", "spherical"])
def test_bic_aic_and_sample_match_sklearn_conventions(blobs, covariance_type):
    kwargs = {"covariance_type": covariance_type, "random_state": 0, "max_iter": 200, "tol": 1e-8}
    ours = GaussianMixture(3, **kwargs).fit(blobs)
    sk = SkGaussianMixture(3, **kwargs).fit(blobs)
    assert ours.score(blobs) == pytest.approx(sk.score(blobs), abs=1e-3)
    p = ours._mixture.n_free_parameters()
    assert p == sk._n_parameters()
    assert ours.bic(blobs) == pytest.approx(-2 * ours.score(blobs) * len(blobs) + p * np.log(600))
    assert ours.aic(blobs) == pytest.approx(-2 * ours.score(blobs) * len(blobs) + 2 * p)
    x, labels = ours.sample(500)
    assert x.shape == (500, 3) and labels.shape == (500,)
    assert np.bincount(labels, minlength=3).sum() == 500


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (np.array([[0.0, np.nan], [1.0, 2.0], [3.0, 4.0]]), "NaN"),
        (np.array([[0.0, np.inf], [1.0, 2.0], [3.0, 4.0]]), "infinity"),
        (torch.tensor([[0.0, float("nan")], [1.0, 2.0], [3.0, 4.0]]), "NaN"),
        (np.arange(6.0), "2D"),
        (torch.arange(6.0), "2D"),
        (np.array([["a", "b"], ["c", "d"], ["e", "f"]]), "convert"),
        (np.ones((2, 2)), "n_samples >= n_components"),
    ],
)
def test_bad_input_raises_value_error(x, match):
    with pytest.raises(ValueError, match=match):
        GaussianMixture(3).fit(x)


def test_wrong_feature_count_after_fit(blobs):
    gm = GaussianMixture(2, random_state=0).fit(blobs)
    with pytest.raises(ValueError, match="features"):
        gm.predict(blobs[:, :2])
    with pytest.raises(ValueError, match="features"):
        gm.predict(torch.tensor(blobs[:, :2]))


@pytest.mark.parametrize(
    "params",
    [
        {"fitter": "newton"},
        {"covariance_type": "banded"},
        {"n_components": 0},
        {"tol": -1.0},
        {"dtype": "float16"},
        {"init_params": "magic"},
    ],
)
def test_bad_parameters_raise_value_error(blobs, params):
    with pytest.raises(ValueError):
        GaussianMixture(**params).fit(blobs)


def test_bad_initial_parameters_raise_value_error(blobs):
    with pytest.raises(ValueError, match="normalized"):
        GaussianMixture(2, weights_init=[0.5, 0.6]).fit(blobs)
    with pytest.raises(ValueError, match="shape"):
        GaussianMixture(2, means_init=np.zeros((3, 3))).fit(blobs)


def test_degenerate_data_gives_no_nan():
    x = np.repeat(np.array([[1.0, 2.0, 3.0]]), 50, axis=0)
    for covariance_type in ("full", "tied", "diag", "spherical"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gm = GaussianMixture(2, covariance_type=covariance_type, random_state=0).fit(x)
        assert np.isfinite(gm.means_).all() and np.isfinite(gm.covariances_).all()
        assert np.isfinite(gm.score_samples(x)).all()


@pytest.mark.parametrize("fitter", ["em", "preconditioned"])
@pytest.mark.parametrize("covariance_type", ["full", "diag", "spherical", "tied"])
def test_emptied_component_is_reseeded_and_counted(fitter, covariance_type):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-5, 1, (200, 2)), rng.normal(5, 1, (200, 2))])
    far = np.array([[1e4, 1e4]])  # a component nobody is near: it loses all its mass
    means = np.concatenate([[[-5.0, 0.0]], [[5.0, 0.0]], far])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = GaussianMixture(
            3,
            covariance_type=covariance_type,
            fitter=fitter,
            means_init=means,
            max_iter=5,
            tol=0.0,
        ).fit(x)
    assert gm.history_["n_reseeded"][0] >= 1
    assert sum(gm.history_["n_reseeded"]) >= 1
    assert np.abs(gm.means_).max() < 100  # the far component now sits on the data
    assert np.isfinite(gm.covariances_).all() and (gm.weights_ > 0).all()
    assert np.isfinite(gm.score_samples(x)).all()


def test_convergence_uses_the_mean_log_likelihood(blobs):
    small = GaussianMixture(3, random_state=0, tol=1e-3).fit(blobs)
    big = GaussianMixture(3, random_state=0, tol=1e-3).fit(np.tile(blobs, (10, 1)))
    assert small.n_iter_ == big.n_iter_
    assert small.lower_bound_ == pytest.approx(big.lower_bound_, abs=1e-9)


def test_warm_start_continues(blobs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = GaussianMixture(3, warm_start=True, max_iter=2, random_state=0, tol=0.0)
        gm.fit(blobs)
        first = gm.lower_bound_
        gm.fit(blobs)
    assert gm.lower_bound_ >= first - 1e-12

"""The drop-in contract around the numbers: dtypes, user starts, messages, fitted attributes,
the tied start of one-point initializations, BIC/AIC over DataLoaders, declarative validation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.utils._param_validation import InvalidParameterError
from torch.utils.data import DataLoader, TensorDataset

from implicit_em.mixture import GaussianMixture

COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
ATTRIBUTES = ("weights_", "means_", "covariances_", "precisions_", "precisions_cholesky_")


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_data_dtype_is_kept_in_attributes_and_outputs(blobs, covariance_type, dtype):
    x = blobs.astype(dtype)
    gm = GaussianMixture(3, covariance_type=covariance_type, random_state=0).fit(x)
    for name in ATTRIBUTES:
        assert getattr(gm, name).dtype == dtype, name
    assert gm.score_samples(x).dtype == dtype
    assert gm.predict_proba(x).dtype == dtype
    assert gm.sample(5)[0].dtype == dtype
    t = GaussianMixture(3, covariance_type=covariance_type, random_state=0).fit(torch.tensor(x))
    assert t.means_.dtype == dtype
    assert t.score_samples(torch.tensor(x)).dtype == torch.from_numpy(x).dtype


def test_methods_compute_in_the_common_type_as_sklearn(blobs):
    gm = GaussianMixture(3, random_state=0).fit(blobs.astype(np.float32))
    assert gm.score_samples(blobs).dtype == np.float64
    gm64 = GaussianMixture(3, random_state=0).fit(blobs)
    assert gm64.predict_proba(blobs.astype(np.float32)).dtype == np.float64


def test_float32_agrees_with_float64(blobs):
    start = {"means_init": blobs[:3], "random_state": 0, "tol": 1e-6}
    f32 = GaussianMixture(3, **start).fit(blobs.astype(np.float32))
    f64 = GaussianMixture(3, **start).fit(blobs)
    np.testing.assert_allclose(f32.means_, f64.means_, rtol=1e-3, atol=1e-3)
    assert f32.score(blobs.astype(np.float32)) == pytest.approx(f64.score(blobs), abs=1e-4)


def test_an_explicit_dtype_overrides_the_data(blobs):
    down = GaussianMixture(3, dtype="float32", random_state=0).fit(blobs)
    assert down.means_.dtype == np.float32 and down.score_samples(blobs).dtype == np.float32
    up = GaussianMixture(3, dtype="float64", random_state=0).fit(blobs.astype(np.float32))
    assert up.means_.dtype == np.float64
    assert up.score_samples(blobs.astype(np.float32)).dtype == np.float64


def test_a_float32_dataloader_is_fitted_in_float32(blobs):
    loader = DataLoader(TensorDataset(torch.tensor(blobs, dtype=torch.float32)), batch_size=128)
    gm = GaussianMixture(3, random_state=0).fit(loader)
    assert gm.means_.dtype == np.float32


def test_float32_weights_init_within_float32_rounding_is_accepted(blobs):
    w = np.random.RandomState(3).rand(2).astype(np.float32)
    w /= w.sum()
    w[0] += np.float32(1.5e-7)  # a float32 sum of 1.0000001
    assert abs(float(w.sum(dtype=np.float64)) - 1) > 1e-8
    gm = GaussianMixture(2, weights_init=w, random_state=0).fit(blobs.astype(np.float32))
    assert gm.weights_.dtype == np.float32
    with pytest.raises(ValueError, match="should be normalized"):
        GaussianMixture(2, weights_init=w.astype(np.float64) + 1e-6).fit(blobs)


@pytest.mark.parametrize(
    ("covariance_type", "precisions"),
    [
        ("full", np.array([np.diag([-1.0, 1.0, 1.0]), np.eye(3)])),
        ("tied", np.diag([-1.0, 1.0, 1.0])),
        ("full", np.array([np.eye(3), np.ones((3, 3))])),
        ("tied", np.ones((3, 3))),
        ("full", np.array([[[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]], np.eye(3)])),
    ],
    ids=["indefinite full", "indefinite tied", "singular full", "singular tied", "asymmetric"],
)
def test_invalid_precisions_init_are_named(blobs, covariance_type, precisions):
    gm = GaussianMixture(2, covariance_type=covariance_type, precisions_init=precisions)
    with pytest.raises(
        ValueError, match=f"'{covariance_type} precision' should be symmetric, posi"
    ):
        gm.fit(blobs)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"weights_init": np.array([1.2, 1.5])},
            r"should be in the range \[0, 1\], but got max value 1.20000, min value 1.50000",
        ),
        ({"precisions_init": np.ones((3, 3, 3))}, "The parameter 'full precision' should have"),
        ({"covariance_type": "diag", "precisions_init": -np.ones((2, 3))}, "'diag precision' sh"),
    ],
)
def test_messages_are_sklearns(blobs, params, message):
    with pytest.raises(ValueError, match=message):
        GaussianMixture(2, **params).fit(blobs)
    with pytest.raises(ValueError, match=message):
        SkGaussianMixture(2, **params).fit(blobs)


def test_degenerate_data_names_the_remedies():
    x = np.vstack([np.ones((5, 3)), np.zeros((5, 3))])
    for covariance_type in COVARIANCE_TYPES:
        gm = GaussianMixture(10, reg_covar=0, covariance_type=covariance_type, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", ConvergenceWarning)  # k-means finds 2 of 10 clusters
            with pytest.raises(ValueError, match="increase reg_covar, or scale the input data"):
                gm.fit(x)


def test_lower_bounds_lists_every_pass(blobs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm = GaussianMixture(3, random_state=0, max_iter=5, tol=0).fit(blobs)
    assert len(gm.lower_bounds_) == gm.n_iter_ == 5
    assert gm.lower_bounds_[-1] == gm.lower_bound_
    assert np.all(np.diff(gm.lower_bounds_) >= -1e-10)


@pytest.mark.parametrize("init_params", ["k-means++", "random_from_data"])
def test_tied_start_of_one_point_inits_is_sklearns(blobs, init_params):
    """scikit-learn's wide tied start: the same path, the same result, for the same seed."""
    x = blobs + 20.0  # an offset makes the raw second moment, and so the start, very wide
    kwargs = {"covariance_type": "tied", "init_params": init_params, "random_state": 1}
    ours = GaussianMixture(4, max_iter=0, **kwargs)
    sk = SkGaussianMixture(4, max_iter=0, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        np.testing.assert_allclose(ours.fit(x).covariances_, sk.fit(x).covariances_, rtol=1e-10)
    assert ours.covariances_.diagonal().min() > 10 * np.cov(x.T).diagonal().max()
    ours, sk = GaussianMixture(4, **kwargs).fit(x), SkGaussianMixture(4, **kwargs).fit(x)
    assert ours.n_iter_ == sk.n_iter_
    assert ours.lower_bound_ == pytest.approx(sk.lower_bound_, abs=1e-8)
    np.testing.assert_allclose(ours.means_, sk.means_, rtol=1e-6)


def test_bic_and_aic_accept_a_dataloader(blobs):
    gm = GaussianMixture(3, random_state=0).fit(blobs)
    loader = DataLoader(TensorDataset(torch.tensor(blobs)), batch_size=100)
    assert gm.bic(loader) == pytest.approx(gm.bic(blobs), rel=1e-12)
    assert gm.aic(loader) == pytest.approx(gm.aic(blobs), rel=1e-12)
    assert gm.score(loader) == pytest.approx(gm.score(blobs), rel=1e-12)


def test_validation_is_sklearns_parameter_constraints(blobs):
    assert set(GaussianMixture._parameter_constraints) == set(GaussianMixture().get_params())
    with pytest.raises(InvalidParameterError, match="'covariance_type' parameter of Gaussian"):
        GaussianMixture(covariance_type="banded").fit(blobs)
    with pytest.raises(InvalidParameterError, match="'batch_size' parameter"):
        GaussianMixture(batch_size=0).fit(blobs)


def test_verbose_interval(blobs, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        GaussianMixture(3, random_state=0, max_iter=6, tol=0, verbose=1, verbose_interval=3).fit(
            blobs
        )
    assert capsys.readouterr().out.count("Iteration") == 2

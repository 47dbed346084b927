"""Chunked E-step, partial_fit and DataLoader input: exact EM over batches."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning
from torch.utils.data import DataLoader, TensorDataset

from implicit_em.mixture import GaussianMixture

TYPES = ["full", "tied", "diag", "spherical"]


def _start(x: np.ndarray, k: int, covariance_type: str) -> dict:
    gm = GaussianMixture(k, covariance_type=covariance_type, max_iter=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.fit(x)
    return {
        "weights_init": gm.weights_,
        "means_init": gm.means_,
        "precisions_init": gm.precisions_,
        "covariance_type": covariance_type,
        "tol": 0.0,
    }


def _fit(x, **kwargs) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianMixture(4, **kwargs).fit(x)


@pytest.mark.parametrize("covariance_type", TYPES)
def test_dataloader_and_chunks_equal_whole_data_em(blobs, covariance_type):
    start = _start(blobs, 4, covariance_type)
    whole = _fit(blobs, max_iter=8, **start)
    chunked = _fit(blobs, max_iter=8, batch_size=50, **start)
    loader = DataLoader(TensorDataset(torch.tensor(blobs)), batch_size=64, shuffle=True)
    streamed = _fit(loader, max_iter=8, **start)
    for other in (chunked, streamed):
        np.testing.assert_allclose(other.means_, whole.means_, atol=1e-10)
        np.testing.assert_allclose(other.covariances_, whole.covariances_, atol=1e-10)
        np.testing.assert_allclose(other.weights_, whole.weights_, atol=1e-12)
        assert other.lower_bound_ == pytest.approx(whole.lower_bound_, abs=1e-12)


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_partial_fit_over_batches_is_exact_em(blobs, covariance_type):
    start = _start(blobs, 4, covariance_type)
    whole = _fit(blobs, max_iter=5, **start)
    online = GaussianMixture(4, **start)
    batches = np.array_split(blobs, 7)
    for _ in range(5):
        for batch in batches[:-1]:
            online.partial_fit(batch, end_of_pass=False)
        online.partial_fit(batches[-1])
    assert online.n_iter_ == 5
    np.testing.assert_allclose(online.means_, whole.means_, atol=1e-10)
    np.testing.assert_allclose(online.covariances_, whole.covariances_, atol=1e-10)
    assert online.history_["log_likelihood"] == pytest.approx(
        whole.history_["log_likelihood"], abs=1e-12
    )


def test_partial_fit_default_is_one_step_per_call(blobs):
    gm = GaussianMixture(3, random_state=0)
    for batch in np.array_split(blobs, 4):
        gm.partial_fit(batch)
    assert gm.n_iter_ == 4
    assert np.isfinite(gm.score(blobs))


def test_one_shot_iterator_is_rejected(blobs):
    with pytest.raises(ValueError, match="re-iterable"):
        GaussianMixture(2).fit(iter([torch.tensor(blobs)]))


@settings(max_examples=15, deadline=None)
@given(
    offset=st.sampled_from([0.0, 1e3, 1e6]),
    scale=st.sampled_from([1e-3, 1.0, 10.0]),
    covariance_type=st.sampled_from(TYPES),
    n_features=st.sampled_from([3, 18]),
    seed=st.integers(0, 10_000),
)
def test_float32_variances_never_negative(offset, scale, covariance_type, n_features, seed):
    """Large offsets, a constant feature and duplicated rows in float32: finite, positive
    (18 features: `full`'s features-last residuals)."""
    rng = np.random.default_rng(seed)
    x = offset + scale * rng.standard_normal((400, n_features))
    x[:, 1] = offset  # a constant feature
    x[200:] = x[:200]  # duplicated points
    gm = _fit(
        x.astype(np.float32),
        max_iter=10,
        dtype="float32",
        batch_size=128,
        covariance_type=covariance_type,
        random_state=seed,
        reg_covar=1e-6,
    )
    cov = gm.covariances_
    assert np.isfinite(cov).all() and np.isfinite(gm.means_).all()
    variances = (
        np.diagonal(cov, axis1=-2, axis2=-1)
        if cov.ndim >= 2 and covariance_type in ("full", "tied")
        else cov
    )
    assert (variances > 0).all()
    assert np.isfinite(gm.score_samples(x.astype(np.float32))).all()


@pytest.mark.parametrize("covariance_type, data", [("diag", "blobs"), ("full", "wide_blobs")])
def test_float32_tracks_float64(covariance_type, data, request):
    x = request.getfixturevalue(data)
    start = _start(x, 4, covariance_type)
    kwargs = {"max_iter": 10, **start}
    f64 = _fit(x, **kwargs)
    f32 = _fit(x.astype(np.float32), dtype="float32", batch_size=100, **kwargs)
    assert f32.means_.dtype == np.float32
    assert abs(f32.lower_bound_ - f64.lower_bound_) < 1e-4


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_default_internal_chunks_equal_one_whole_chunk(covariance_type):
    """``batch_size=None`` streams cache-sized chunks internally: still whole-data EM."""
    x = np.random.default_rng(0).standard_normal((20_000, 3)) * [1.0, 2.0, 0.5]
    x[::2] += 4.0
    start = _start(x[:2000], 2, covariance_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        whole = GaussianMixture(2, max_iter=4, batch_size=len(x), **start).fit(x)
        default = GaussianMixture(2, max_iter=4, **start).fit(x)
    np.testing.assert_allclose(default.means_, whole.means_, atol=1e-10)
    np.testing.assert_allclose(default.covariances_, whole.covariances_, atol=1e-10)
    assert default.lower_bound_ == pytest.approx(whole.lower_bound_, abs=1e-12)

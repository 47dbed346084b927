"""The fixed point of a whole fit, with its prepared chunks kept or streamed, against
scikit-learn's, and the k-means of the initialization against scikit-learn's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from implicit_em.mixture import GaussianMixture
from implicit_em.mixture.kmeans import kmeans_labels, kmeans_plusplus

TOLERANCE = {"float64": 1e-12, "float32": 1e-6}
PASSES = 250


def _fit(cls, x: np.ndarray, covariance_type: str, passes: int = PASSES, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return cls(
            4,
            covariance_type=covariance_type,
            max_iter=passes,
            tol=0.0,
            means_init=x[[0, 150, 300, 450]],
            random_state=0,
            **kwargs,
        ).fit(x)


@pytest.mark.slow
@pytest.mark.parametrize("covariance_type", ["full", "tied", "diag", "spherical"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fixed_point_is_sklearns(blobs, covariance_type, dtype):
    """From scikit-learn's own k-means start, the mean log-likelihood at the fixed point is
    scikit-learn's to 1e-12 in float64 and 1e-6 in float32."""
    reference = _fit(SkGaussianMixture, blobs, covariance_type).score(blobs)
    ours = _fit(GaussianMixture, blobs, covariance_type, dtype=dtype)
    assert abs(float(ours.score(blobs)) - reference) <= TOLERANCE[dtype]


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_kept_chunks_give_the_streamed_fit(blobs, covariance_type):
    """Chunks kept across passes (the default budget) or prepared at every pass
    (`cache_bytes=0`) give the same fit, bit for bit."""
    kwargs = {"dtype": "float32", "batch_size": 97, "passes": 20}
    kept = _fit(GaussianMixture, blobs, covariance_type, **kwargs)
    streamed = _fit(GaussianMixture, blobs, covariance_type, cache_bytes=0, **kwargs)
    np.testing.assert_array_equal(kept.means_, streamed.means_)
    np.testing.assert_array_equal(kept.covariances_, streamed.covariances_)
    assert kept.lower_bounds_ == streamed.lower_bounds_


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("k", "std"), [(4, 1.5), (7, 4.0)])
def test_kmeans_draws_and_labels_are_sklearns(seed, k, std):
    x, _ = make_blobs(n_samples=900, n_features=5, centers=k, cluster_std=std, random_state=seed)
    _, expected = sklearn_kmeans_plusplus(x, k, random_state=np.random.RandomState(seed))
    _, indices = kmeans_plusplus(x, k, np.random.RandomState(seed))
    np.testing.assert_array_equal(indices, expected)
    labels = KMeans(k, n_init=1, random_state=np.random.RandomState(seed)).fit(x).labels_
    np.testing.assert_array_equal(kmeans_labels(x, k, np.random.RandomState(seed)), labels)

"""The fixed point of a whole fit, with its prepared chunks kept or streamed, against
scikit-learn's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from implicit_em.mixture import GaussianMixture

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

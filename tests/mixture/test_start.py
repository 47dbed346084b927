"""The starting mixture: every row by default, as scikit-learn; a sample only on request."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from implicit_em.mixture import GaussianMixture


def _blobs(n_rows: int) -> np.ndarray:
    x, _ = make_blobs(n_rows, 8, centers=8, cluster_std=4.0, random_state=0)
    return x


def _assert_same_fit(ours: GaussianMixture, sk: SkGaussianMixture, x: np.ndarray) -> None:
    assert ours.n_iter_ == sk.n_iter_
    assert ours.converged_ == sk.converged_
    assert abs(ours.lower_bound_ - sk.lower_bound_) <= 1e-8
    assert abs(ours.score(x) - sk.score(x)) <= 1e-8
    np.testing.assert_allclose(ours.weights_, sk.weights_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(ours.means_, sk.means_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(ours.covariances_, sk.covariances_, rtol=0, atol=1e-8)


@pytest.mark.parametrize("n_rows", [100_001, pytest.param(250_000, marks=pytest.mark.slow)])
def test_default_fit_is_sklearns_beyond_100k_rows(n_rows):
    x = _blobs(n_rows)
    sk = SkGaussianMixture(8, random_state=0).fit(x)
    ours = GaussianMixture(8, random_state=0).fit(x)
    _assert_same_fit(ours, sk, x)


def test_a_sampled_start_is_not_sklearns():
    """The control: 100,000 of 100,001 rows give another start, and here another fit."""
    x = _blobs(100_001)
    sk = SkGaussianMixture(8, random_state=0).fit(x)
    sampled = GaussianMixture(8, random_state=0, init_sample_size=100_000).fit(x)
    assert abs(sampled.lower_bound_ - sk.lower_bound_) > 1e-3


def test_a_sampled_start_of_every_row_is_the_default(blobs):
    default = GaussianMixture(4, random_state=0).fit(blobs)
    sampled = GaussianMixture(4, random_state=0, init_sample_size=len(blobs)).fit(blobs)
    np.testing.assert_array_equal(sampled.means_, default.means_)


def test_init_sample_size_is_validated(blobs):
    with pytest.raises(ValueError, match="init_sample_size"):
        GaussianMixture(2, init_sample_size=0).fit(blobs)

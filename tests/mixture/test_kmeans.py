"""k-means++ seeds and Lloyd labels against scikit-learn's, and the label sums kept across
Lloyd steps against sums taken afresh."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cluster import KMeans
from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus
from sklearn.datasets import make_blobs

from implicit_em.mixture.kmeans import (
    LabelSums,
    kmeans_labels,
    kmeans_plusplus,
    transposed_lifted,
)


def _sklearn_kmeans(x: np.ndarray, k: int, seed: int) -> KMeans:
    return KMeans(k, n_init=1, random_state=np.random.RandomState(seed)).fit(x)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("k", "std"), [(4, 1.5), (7, 4.0)])
def test_kmeans_draws_and_labels_are_sklearns(seed, k, std):
    x, _ = make_blobs(n_samples=900, n_features=5, centers=k, cluster_std=std, random_state=seed)
    _, expected = sklearn_kmeans_plusplus(x, k, random_state=np.random.RandomState(seed))
    _, indices = kmeans_plusplus(x, k, np.random.RandomState(seed))
    np.testing.assert_array_equal(indices, expected)
    labels = _sklearn_kmeans(x, k, seed).labels_
    np.testing.assert_array_equal(kmeans_labels(x, k, np.random.RandomState(seed)), labels)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_long_lloyd_runs_give_sklearns_labels(seed):
    """Overlapping clusters take scikit-learn 14 to 42 Lloyd steps: the label sums, updated
    step by step from the rows that changed label, keep the labels scikit-learn's."""
    x, _ = make_blobs(n_samples=3000, n_features=6, centers=12, cluster_std=5.0, random_state=seed)
    reference = _sklearn_kmeans(x, 12, seed)
    assert reference.n_iter_ >= 10
    np.testing.assert_array_equal(
        kmeans_labels(x, 12, np.random.RandomState(seed)), reference.labels_
    )


def test_float32_rows_give_the_labels_of_their_float64_values():
    x, _ = make_blobs(n_samples=3000, n_features=6, centers=12, cluster_std=5.0, random_state=0)
    x32 = x.astype(np.float32)
    reference = _sklearn_kmeans(x32.astype(np.float64), 12, 0)
    np.testing.assert_array_equal(
        kmeans_labels(x32, 12, np.random.RandomState(0)), reference.labels_
    )


def test_empty_clusters_are_relocated_as_sklearn_does():
    """Five distinct points repeated for eight clusters: empty clusters at every step."""
    rng = np.random.RandomState(0)
    x = np.repeat(rng.randn(5, 3), 200, axis=0)
    with pytest.warns(Warning, match="distinct clusters"):
        reference = _sklearn_kmeans(x, 8, 0)
    np.testing.assert_array_equal(kmeans_labels(x, 8, np.random.RandomState(0)), reference.labels_)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.integers(1, 6),
    moved=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5),
)
def test_label_sums_kept_across_steps_are_sums_afresh(seed, k, moved):
    """After any sequence of relabelings (a few rows or most of them), the kept sums equal
    the sums taken afresh to 1e-12 and the counts exactly."""
    rng = np.random.default_rng(seed)
    x = torch.as_tensor(rng.normal(3.0, 2.0, size=(200, 4)))
    shift = x.mean(dim=0)
    augmented = transposed_lifted(x, shift)[:-1]
    sums = LabelSums(augmented, x, shift, k)
    labels = torch.as_tensor(rng.integers(0, k, 200))
    for fraction in [1.0, *moved]:
        relabel = torch.as_tensor(rng.random(200) < fraction)
        labels = torch.where(relabel, torch.as_tensor(rng.integers(0, k, 200)), labels)
        kept_sums, kept_counts = sums.update(labels)
        fresh = torch.zeros(k, 4, dtype=torch.float64).index_add_(0, labels, x - shift)
        torch.testing.assert_close(kept_sums, fresh, rtol=0, atol=1e-12)
        expected = torch.bincount(labels, minlength=k).to(torch.float64)
        assert torch.equal(kept_counts, expected)

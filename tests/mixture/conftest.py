"""Shared data for the mixture tests."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs


@pytest.fixture(scope="session")
def blobs() -> np.ndarray:
    x, _ = make_blobs(n_samples=600, n_features=3, centers=4, cluster_std=1.5, random_state=0)
    return x


@pytest.fixture(scope="session")
def separated() -> np.ndarray:
    x, _ = make_blobs(
        n_samples=300,
        n_features=2,
        centers=[[-6, 0], [0, 6], [6, 0]],
        cluster_std=0.8,
        random_state=1,
    )
    return x


@pytest.fixture(scope="session")
def wide_blobs() -> np.ndarray:
    """Blobs with 20 features: wide enough for `full`'s features-last residual layout."""
    x, _ = make_blobs(n_samples=800, n_features=20, centers=4, cluster_std=1.5, random_state=0)
    return x

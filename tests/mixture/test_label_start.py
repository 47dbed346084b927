"""The starting M-step of hard starts from each component's rows against scikit-learn's
M-step (`_estimate_gaussian_parameters`) of the same one-hot responsibilities, and against
our own M-step of the one-hot matrix (`responsibility_start`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.mixture._gaussian_mixture import _estimate_gaussian_parameters

from implicit_em.mixture.covariance import COVARIANCE_TYPES, covariance_model
from implicit_em.mixture.initialization import responsibility_start
from implicit_em.mixture.label_start import hard_start, label_rows, one_point_start
from implicit_em.mixture.parameters import Mixture

TYPES = sorted(COVARIANCE_TYPES)


def _data(seed: int, n: int, d: int, offset: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return offset + rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, size=d)


def _assert_sklearns(mixture: Mixture, x: np.ndarray, resp: np.ndarray, reg: float) -> None:
    """Equal to scikit-learn's M-step to 1e-10 relative; `atol` is the rounding of
    scikit-learn's raw moments ($\\sum r x^2 / N - \\mu^2$ loses about
    $\\varepsilon \\max x^2$), which shows where a variance is `reg` alone."""
    nk, means, covariances = _estimate_gaussian_parameters(x, resp, reg, mixture.model.name)
    atol = 64 * np.finfo(np.float64).eps * float(np.abs(x).max()) ** 2
    np.testing.assert_allclose(mixture.weights.numpy(), nk / nk.sum(), rtol=1e-10, atol=0)
    np.testing.assert_allclose(mixture.means.numpy(), means, rtol=1e-10, atol=atol)
    np.testing.assert_allclose(mixture.covariances.numpy(), covariances, rtol=1e-10, atol=atol)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 80),
    d=st.integers(1, 5),
    k=st.integers(1, 6),
    offset=st.sampled_from([0.0, 10.0]),
    reg=st.sampled_from([1e-6, 1e-3, 0.5]),
)
def test_label_start_is_sklearns_m_step_of_the_one_hot(seed, n, d, k, offset, reg):
    """Random labels leave some components empty (their mean 0 and covariance `reg`, as
    scikit-learn's) and some with one row. The M-step of the one-hot matrix agrees but for
    the means of empty components, which it puts at its shift (the data's mean)."""
    x = _data(seed, n, d, offset)
    labels = np.random.default_rng(seed + 1).integers(0, k, size=n)
    rows = label_rows(labels, k)
    for j, index in enumerate(rows):
        np.testing.assert_array_equal(index.numpy(), np.flatnonzero(labels == j))
    resp = np.zeros((n, k))
    resp[np.arange(n), labels] = 1.0
    for name in TYPES:
        model = covariance_model(name)
        mixture = hard_start(model, x, rows, reg)
        _assert_sklearns(mixture, x, resp, reg)
        one_hot = responsibility_start(model, x, resp, reg)
        atol = 64 * np.finfo(np.float64).eps * float(np.abs(x).max()) ** 2
        held = resp.sum(axis=0) > 0
        for ours, theirs in zip(
            (mixture.weights, mixture.means[held], mixture.covariances),
            (one_hot.weights, one_hot.means[held], one_hot.covariances),
            strict=True,
        ):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=atol)


@pytest.mark.parametrize("name", TYPES)
def test_empty_components_start_at_reg_covar(name):
    x = _data(0, 50, 3, 5.0)
    labels = np.where(np.arange(50) < 20, 0, 2)
    mixture = hard_start(covariance_model(name), x, label_rows(labels, 4), 0.25)
    resp = np.zeros((50, 4))
    resp[np.arange(50), labels] = 1.0
    _assert_sklearns(mixture, x, resp, 0.25)
    if name != "tied":
        np.testing.assert_array_equal(mixture.means[[1, 3]].numpy(), 0.0)
        expected = covariance_model(name).regularized(mixture.covariances[[1, 3]] * 0, 0.25)
        np.testing.assert_array_equal(mixture.covariances[[1, 3]].numpy(), expected.numpy())


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("indices", [[7, 2, 30], [4, 4, 11, 4]])
def test_one_point_start_is_sklearns_m_step_of_the_one_hot(name, indices):
    """One chosen row per component, a row repeated for several components included; for
    `tied`, scikit-learn's wide start of rows that do not sum to one."""
    x = _data(3, 40, 4, 2.0)
    k = len(indices)
    resp = np.zeros((40, k))
    resp[indices, np.arange(k)] = 1.0
    mixture = one_point_start(covariance_model(name), x, np.asarray(indices), 1e-4)
    _assert_sklearns(mixture, x, resp, 1e-4)

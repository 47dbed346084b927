r"""The starting parameters of a fit: the start of `init_params`, its M-step, then the user's
`weights_init` / `means_init` / `precisions_init` (checked here).

The start is computed on the rows of `initial_sample`: every row (the default, as
scikit-learn), or `limit` rows drawn without replacement and kept in their order. Under a
distributed fit the sample is drawn from the concatenated data (the shards in rank order) with
rank 0's random state and gathered on every rank, so that every rank computes the start one
process computes on the concatenated data.

The four `init_params` give initial responsibilities $r^{(0)}$ on a sample of the data, and
the starting mixture is their M-step, as scikit-learn takes it (`starting_mixture`):

* `kmeans`: one-hot k-means labels, and `k-means++` / `random_from_data`: one chosen row per
  component, $r^{(0)}_{c_j j} = 1$ and zero elsewhere. These hard starts go to
  `label_start`, which reads each component's rows and never builds the one-hot matrix;
* `random`: uniform draws, normalized per row, whose M-step reads the `[N, K]` matrix
  (`responsibility_start`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from implicit_em.mixture.covariance import CovarianceModel
from implicit_em.mixture.distributed import gather_global_rows, share_random_state
from implicit_em.mixture.kmeans import kmeans_labels, kmeans_plusplus
from implicit_em.mixture.label_start import hard_start, label_rows, one_point_start
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.statistics import (
    accumulate_responsibilities,
    floored_masses,
    m_step,
    zero_statistics,
)

__all__ = [
    "INIT_PARAMS",
    "check_means",
    "check_precisions",
    "check_weights",
    "initial_sample",
    "responsibility_start",
    "starting_mixture",
]

INIT_PARAMS = ("kmeans", "k-means++", "random", "random_from_data")


def initial_sample(
    x: np.ndarray | Tensor, rng: np.random.RandomState, limit: int | None
) -> np.ndarray:
    """The rows `[M, D]` (float64, read-only: they may be `x` itself) the initial
    responsibilities are computed on: all rows of the (concatenated) data when `limit` is None
    or there are at most `limit`, else `limit` rows drawn from `rng` without replacement, in
    their order (a draw that scikit-learn does not make)."""
    x = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    share_random_state(rng)

    def pick(n_rows: int) -> np.ndarray | None:
        if limit is None or n_rows <= limit:
            return None
        return np.sort(rng.choice(n_rows, limit, replace=False))

    return gather_global_rows(x, pick)


def starting_mixture(
    model: CovarianceModel,
    x: np.ndarray,
    n_components: int,
    init_params: str,
    reg_covar: float,
    rng: np.random.RandomState,
) -> Mixture:
    """The M-step of `init_params`' initial responsibilities on the sample `x` (float64),
    drawing from `rng` as scikit-learn does (the same draws for the same `random_state`)."""
    n, k = x.shape[0], n_components
    if init_params == "kmeans":
        return hard_start(model, x, label_rows(kmeans_labels(x, k, rng), k), reg_covar)
    if init_params == "random":
        resp = rng.uniform(size=(n, k))
        return responsibility_start(model, x, resp / resp.sum(axis=1, keepdims=True), reg_covar)
    if init_params == "random_from_data":
        indices = rng.choice(n, size=k, replace=False)
    else:
        _, indices = kmeans_plusplus(x, k, rng)
    return one_point_start(model, x, indices, reg_covar)


def responsibility_start(
    model: CovarianceModel, x: np.ndarray, resp: np.ndarray, reg_covar: float
) -> Mixture:
    """The M-step of soft responsibilities `resp` `[N, K]` (rows summing to one) on the
    sample `x` (float64)."""
    xs, r = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(resp, dtype=torch.float64)
    k, dim = r.shape[1], xs.shape[1]
    shift = xs.mean(dim=0)
    y = xs - shift
    ref = xs.new_zeros(k, dim)
    if model.centered:
        ref = (r.T @ y) / floored_masses(r.sum(dim=0))[:, None]
    stats = zero_statistics(model, k, dim, xs)
    accumulate_responsibilities(stats, y, ref, r, model)
    return m_step(stats, model, shift, ref, reg_covar)


def _as_array(value: object, name: str, shape: tuple[int, ...]) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.float32:
        array = array.astype(np.float64)
    if array.shape != shape:
        raise ValueError(
            f"The parameter '{name}' should have the shape of {shape}, but got {array.shape}"
        )
    if not np.isfinite(array).all():
        raise ValueError(f"The parameter '{name}' contains NaN or infinity")
    return array


def check_weights(value: object, n_components: int) -> np.ndarray:
    """`weights_init` as an array in [0, 1] summing to one (tolerance 1e-6 in float32, 1e-8
    otherwise); the messages are scikit-learn's."""
    weights = _as_array(value, "weights", (n_components,))
    if (weights < 0).any() or (weights > 1).any():
        # scikit-learn's wording, which prints the minimum after "max value" and vice versa.
        raise ValueError(
            "The parameter 'weights' should be in the range [0, 1], but got "
            f"max value {weights.min():.5f}, min value {weights.max():.5f}"
        )
    atol = 1e-6 if weights.dtype == np.float32 else 1e-8
    total = float(weights.sum(dtype=np.float64))
    if abs(1.0 - total) > atol:
        raise ValueError(
            f"The parameter 'weights' should be normalized, but got sum(weights) = {total:.5f}"
        )
    return weights


def check_means(value: object, n_components: int, n_features: int) -> np.ndarray:
    """`means_init` as a `[K, D]` finite array."""
    return _as_array(value, "means", (n_components, n_features))


def check_precisions(
    value: object, covariance_type: str, n_components: int, n_features: int
) -> np.ndarray:
    """`precisions_init` in the type's shape, symmetric positive-definite (`full`, `tied`:
    every eigenvalue > 0) or positive (`diag`, `spherical`); the messages are
    scikit-learn's."""
    shapes = {
        "full": (n_components, n_features, n_features),
        "tied": (n_features, n_features),
        "diag": (n_components, n_features),
        "spherical": (n_components,),
    }
    precisions = _as_array(value, f"{covariance_type} precision", shapes[covariance_type])
    if covariance_type in ("diag", "spherical"):
        if (precisions <= 0).any():
            raise ValueError(f"'{covariance_type} precision' should be positive")
        return precisions
    matrices = precisions.reshape(-1, n_features, n_features)
    symmetric = np.allclose(matrices, matrices.transpose(0, 2, 1))
    if not symmetric or not (np.linalg.eigvalsh(matrices) > 0).all():
        raise ValueError(f"'{covariance_type} precision' should be symmetric, positive-definite")
    return precisions

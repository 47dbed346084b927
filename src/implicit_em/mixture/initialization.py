r"""The starting parameters of a fit: responsibilities from `init_params`, then one M-step,
then the user's `weights_init` / `means_init` / `precisions_init` (checked here).

The responsibilities are computed on the rows of `initial_sample`: every row (the default, as
scikit-learn), or `limit` rows drawn without replacement and kept in their order. Under a distributed fit the
sample is drawn from the concatenated data (the shards in rank order) with rank 0's random
state and gathered on every rank, so that every rank computes the start one process computes
on the concatenated data.

The four `init_params` give initial responsibilities $r^{(0)}$ on a sample of the data:

* `kmeans`: one-hot k-means labels; `random`: uniform draws, normalized per row (both give
  rows that sum to one);
* `k-means++` / `random_from_data`: one chosen row per component, $r^{(0)}_{c_j j} = 1$
  and zero elsewhere, so only $K$ rows carry mass.

The starting mixture is the M-step of $r^{(0)}$, as scikit-learn takes it. For `tied`,
scikit-learn's M-step is $\Sigma = \big(\sum_t x_tx_t^\top - \sum_j N_j\mu_j\mu_j^\top\big)
/\sum_j N_j$, which is the pooled within-component scatter only when every row's
responsibilities sum to one. With one-point-per-component starts $\sum_j N_j = K$ while
$\sum_t x_tx_t^\top$ runs over all $N$ rows, and the formula gives the data's raw
second moment about the origin scaled by about $N/K$: a very wide start.
`tied_covariance_of_one_point_starts` reproduces that start, so that a fit given
scikit-learn's parameters follows scikit-learn's path.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from implicit_em.mixture.covariance import CovarianceModel
from implicit_em.mixture.distributed import gather_global_rows, share_random_state
from implicit_em.mixture.kmeans import kmeans_labels, kmeans_plusplus
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.statistics import accumulate_responsibilities, m_step, zero_statistics

__all__ = [
    "INIT_PARAMS",
    "check_means",
    "check_precisions",
    "check_weights",
    "initial_responsibilities",
    "initial_sample",
    "responsibility_start",
    "tied_covariance_of_one_point_starts",
]

INIT_PARAMS = ("kmeans", "k-means++", "random", "random_from_data")
_ONE_POINT_STARTS = ("k-means++", "random_from_data")


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


def initial_responsibilities(
    x: np.ndarray, n_components: int, init_params: str, rng: np.random.RandomState
) -> np.ndarray:
    """$r^{(0)}$ `[N, K]` (float64) for `init_params`, drawing from `rng` as
    scikit-learn does (the same draws for the same `random_state`)."""
    n, k = x.shape[0], n_components
    resp = np.zeros((n, k))
    if init_params == "kmeans":
        labels = kmeans_labels(x, k, rng)
        resp[np.arange(n), labels] = 1.0
    elif init_params == "random":
        resp = rng.uniform(size=(n, k))
        resp /= resp.sum(axis=1, keepdims=True)
    elif init_params == "random_from_data":
        resp[rng.choice(n, size=k, replace=False), np.arange(k)] = 1.0
    else:
        _, indices = kmeans_plusplus(x, k, rng)
        resp[indices, np.arange(k)] = 1.0
    return resp


def tied_covariance_of_one_point_starts(
    x: Tensor, resp: Tensor, means: Tensor, reg_covar: float
) -> Tensor:
    r"""scikit-learn's tied M-step, $\big(x^\top x - \sum_j N_j\mu_j\mu_j^\top\big)/\sum_j N_j
    + \lambda I$, `[D, D]`, for responsibilities whose rows need not sum to one."""
    n = resp.sum(dim=0) + 10 * torch.finfo(x.dtype).eps
    cov = (x.T @ x - (means * n[:, None]).T @ means) / n.sum()
    cov = 0.5 * (cov + cov.T)
    return cov + reg_covar * torch.eye(x.shape[1], dtype=x.dtype, device=x.device)


def responsibility_start(
    model: CovarianceModel, x: np.ndarray, resp: np.ndarray, init_params: str, reg_covar: float
) -> Mixture:
    """The M-step of the initial responsibilities `resp` on the sample `x` (float64)."""
    xs, r = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(resp, dtype=torch.float64)
    k, dim = r.shape[1], xs.shape[1]
    shift = xs.mean(dim=0)
    y = xs - shift
    ref = xs.new_zeros(k, dim)
    if model.centered:
        ref = (r.T @ y) / (r.sum(dim=0) + 10 * torch.finfo(xs.dtype).eps)[:, None]
    stats = zero_statistics(model, k, dim, xs)
    accumulate_responsibilities(stats, y, ref, r, model)
    mixture = m_step(stats, model, shift, ref, reg_covar)
    if model.name == "tied" and init_params in _ONE_POINT_STARTS:
        cov = tied_covariance_of_one_point_starts(xs, r, mixture.means, reg_covar)
        mixture = Mixture.from_covariances(model, mixture.weights, mixture.means, cov)
    return mixture


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

r"""Streaming sufficient statistics of the EM step, summed chunk by chunk.

For responsibilities $r_{tj}$ of the current parameters and the shared shift $s$
(a fit's first mixture mean, fixed for the fit; see `fitting`) a chunk contributes

$$
N_j = \sum_t r_{tj}, \qquad F_j = \sum_t r_{tj}(x_t - s), \qquad
S_j = \sum_t r_{tj}(x_t - c_j)(x_t - c_j)^\top\ \text{(or its diagonal / trace)},
$$

with $c_j = \mu_j$ for `full` (centered) and $c_j = s$ otherwise. All three are
plain sums, so the statistics of chunks (and of ranks, under `torch.distributed`) add, and the
M-step reads only the totals:

$$
\mu_j' = s + F_j/N_j, \quad \delta_j = \mu_j' - c_j, \quad
\Sigma_j' = S_j/N_j - \delta_j\delta_j^\top + \lambda I, \quad \pi_j' = N_j / \sum_k N_k.
$$

For `full`, $S_j$ is summed in the whitened coordinates of the E-step's residuals
$z_{tj} = U_j^\top(x_t-\mu_j)$ and brought back once per pass,
$S_j = U_j^{-\top}\big(\sum_t r_{tj}z_{tj}z_{tj}^\top\big)U_j^{-1}$. Memory is
$O(B\,K + K\,D^2)$ for a chunk of `B` rows (`full` also holds the $BKD$ whitened
residuals), never $O(N\,K)$. $N_j$ gets
$10\,\varepsilon_{\text{dtype}}$ added, as in scikit-learn, so that an empty component
divides by a positive number.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.mixture.covariance import CovarianceModel
from implicit_em.mixture.parameters import EStep, Mixture, responsibilities
from implicit_em.mixture.workspace import Workspace

__all__ = [
    "Statistics",
    "accumulate",
    "accumulate_responsibilities",
    "empty_components",
    "floored_masses",
    "m_step",
    "reference",
    "zero_statistics",
]

Statistics = dict[str, Tensor]


def reference(mixture: Mixture, shift: Tensor) -> Tensor:
    """The centers $c_j - s$ of the second moment, in shifted coordinates, `[K, D]`."""
    if mixture.model.centered:
        return mixture.means - shift
    return torch.zeros_like(mixture.means)


def zero_statistics(model: CovarianceModel, k: int, d: int, like: Tensor) -> Statistics:
    """Empty sums (`like`'s dtype and device): `n [K]`, `first [K, D]`, `second` (the
    type's shape), `log_likelihood`, `count`."""
    return {
        "n": like.new_zeros(k),
        "first": like.new_zeros(k, d),
        "second": like.new_zeros(model.second_shape(k, d)),
        "log_likelihood": like.new_zeros((), dtype=torch.float64),
        "count": like.new_zeros(()),
    }


def accumulate(
    stats: Statistics,
    rows: Tensor,
    features: Tensor,
    r: Tensor,
    model: CovarianceModel,
    workspace: Workspace,
) -> None:
    """Add the statistics of one chunk (its `row_features` `rows`, the `features` of its
    logits, responsibilities `r`) in place; `workspace` holds the chunk's scratch."""
    first, second = model.moments(rows, features, r, workspace)
    stats["n"] += r.sum(dim=0)
    stats["first"] += first
    stats["second"] += second
    stats["count"] += rows.shape[0]


def accumulate_responsibilities(
    stats: Statistics, y: Tensor, ref: Tensor, r: Tensor, model: CovarianceModel
) -> None:
    """Add the statistics of shifted data `y` under given responsibilities `r` (no E-step:
    the type's `responsibility_moments` about `ref`)."""
    first, second = model.responsibility_moments(y, ref, r, Workspace())
    stats["n"] += r.sum(dim=0)
    stats["first"] += first
    stats["second"] += second
    stats["count"] += y.shape[0]


def e_step(stats: Statistics, rows: Tensor, constants: EStep, workspace: Workspace) -> Tensor:
    """E-step of a chunk given its `row_features` `rows`: add its statistics and return its
    per-sample log-likelihood `[B]`.

    `constants` are the pass's (`EStep.of`); `workspace` holds the chunk's
    intermediates (pass the same one for every chunk).
    """
    log_p, r, features = responsibilities(rows, constants, workspace)
    accumulate(stats, rows, features, r, constants.model, workspace)
    stats["log_likelihood"] += log_p.sum(dtype=torch.float64)
    return log_p


def empty_components(masses: Tensor) -> Tensor:
    r"""Components whose mass $N_j$ is below a thousandth of one sample, `[K]` bool.

    Their statistics carry no information (and $S_j/N_j - \delta_j\delta_j^\top$ would
    be pure cancellation), so the M-step gives them `reg_covar` alone and
    `reseed` moves them.
    """
    return masses < 1e-3


def floored_masses(n: Tensor) -> Tensor:
    r"""$N_j + 10\,\varepsilon$ (machine epsilon of `n`'s dtype), scikit-learn's masses: an
    empty component divides by a positive number."""
    return n + 10 * torch.finfo(n.dtype).eps


def m_step(
    stats: Statistics,
    model: CovarianceModel,
    shift: Tensor,
    ref: Tensor,
    reg: float,
    whitening: Tensor | None = None,
) -> Mixture:
    """The closed-form M-step from summed statistics (`ValueError` on a singular covariance).

    `whitening` is the precision Cholesky factor $U$ the E-step whitened `full`
    residuals with (`None` when the features were not whitened).
    """
    n = floored_masses(stats["n"])
    means_y = stats["first"] / n[:, None]
    delta, second = means_y - ref, model.unwhiten(stats["second"], whitening)
    empty = empty_components(stats["n"])
    if bool(empty.any()) and model.per_component:
        delta = torch.where(empty[:, None], torch.zeros_like(delta), delta)
        shape = (-1,) + (1,) * (second.dim() - 1)
        second = torch.where(empty.reshape(shape), torch.zeros_like(second), second)
    cov = model.estimate(second, n, delta, stats["count"], reg)
    return Mixture.from_covariances(model, n / n.sum(), shift + means_y, cov)

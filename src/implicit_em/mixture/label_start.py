r"""The starting M-step of hard starts (k-means labels, and the one-point starts `k-means++`
and `random_from_data`) from each component's rows, with no `[N, K]` one-hot matrix.

A hard start gives every component $j$ a set of rows $R_j$: the rows k-means labelled $j$
(`label_rows`: one stable radix sort of the labels), or the one row chosen for it. The
M-step of the one-hot responsibilities $r_{tj} = [t \in R_j]$ reads only

$$
N_j = |R_j|, \qquad \mu_j = \frac{\sum_{t \in R_j} x_t}{N_j + 10\,\varepsilon}, \qquad
S_j = \sum_{t \in R_j} (x_t - \mu_j)(x_t - \mu_j)^\top
$$

(or what the type keeps of $S_j$, its `scatter`: the diagonal for `diag`, the trace for
`spherical`). `hard_statistics` gathers each component's rows into one buffer, sums them,
centers them in place and takes their scatter while they are in cache: one gather of the
data and $O(ND)$ work besides (`full` and `tied`: $O(ND^2)$ in the scatter's products),
where the one-hot matrix costs $O(NKD)$ in its products and its hardness checks. The
differences come first, so nothing cancels. `m_step` then reads the statistics about the
means themselves (shift 0, reference $\mu_j$, so $\delta_j = 0$):
$\Sigma_j = S_j/(N_j + 10\,\varepsilon) + \lambda I$, and for `tied` the pooled
$\sum_j S_j/N + \lambda I$, which is scikit-learn's `_estimate_gaussian_parameters` of the
one-hot matrix (which takes `diag`, `spherical` and `tied` from raw moments, with their
cancellation).

**The tied start of one-point starts.** These give one chosen row per component a
responsibility of one and every other row zero. scikit-learn's tied M-step is
$\Sigma = \big(\sum_t x_tx_t^\top - \sum_j N_j\mu_j\mu_j^\top\big)/\sum_j N_j$, the pooled
within-component scatter only when every row's responsibilities sum to one. Here
$\sum_j N_j = K$ while $\sum_t x_tx_t^\top$ runs over all $N$ rows, and the formula gives
the data's raw second moment about the origin scaled by about $N/K$: a very wide start.
`one_point_start` reproduces it, so that a fit given scikit-learn's parameters follows
scikit-learn's path.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from implicit_em.mixture.covariance import CovarianceModel
from implicit_em.mixture.covariance.base import eye, sym
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.statistics import Statistics, floored_masses, m_step

__all__ = ["hard_start", "hard_statistics", "label_rows", "one_point_start"]


def label_rows(labels: np.ndarray, k: int) -> list[Tensor]:
    """The rows of each label $0, \\dots, K-1$ of `labels` `[N]`, in order, `K` index
    tensors: one stable sort of the labels in the narrowest unsigned type that holds them
    (numpy's radix sort for up to 65,536 labels)."""
    order = np.argsort(labels.astype(np.min_scalar_type(k)), kind="stable")
    counts = np.bincount(labels, minlength=k)
    return list(torch.as_tensor(order).split(counts.tolist()))


def hard_statistics(model: CovarianceModel, x: Tensor, rows: list[Tensor]) -> Statistics:
    """The statistics of the one-hot responsibilities of `rows` (each component's rows of
    `x` `[N, D]`) about each component's mean: `n` $N_j$, `first` $\\sum_{t \\in R_j} x_t$,
    `second` the type's `scatter` of $x_t - \\mu_j$ (stacked per component, or summed for a
    shared covariance), `count` $\\sum_j N_j$; read by `m_step` with shift 0 and reference
    the means (`first` over `floored_masses(n)`)."""
    k, d = len(rows), x.shape[1]
    counts = x.new_tensor([index.shape[0] for index in rows])
    buffer = x.new_empty(max(index.shape[0] for index in rows), d)
    sums = x.new_empty(k, d)
    scatters = []
    for j, index in enumerate(rows):
        part = torch.index_select(x, 0, index, out=buffer[: index.shape[0]])
        torch.mv(part.T, part.new_ones(part.shape[0]), out=sums[j])
        scatters.append(model.scatter(part.sub_(sums[j] / floored_masses(counts[j]))))
    second = torch.stack(scatters) if model.per_component else sum(scatters)
    return {"n": counts, "first": sums, "second": second, "count": counts.sum()}


def hard_start(model: CovarianceModel, x: np.ndarray, rows: list[Tensor], reg: float) -> Mixture:
    """The M-step of the one-hot responsibilities of `rows` on the sample `x` (float64)."""
    xs = torch.as_tensor(x, dtype=torch.float64)
    stats = hard_statistics(model, xs, rows)
    means = stats["first"] / floored_masses(stats["n"])[:, None]
    return m_step(stats, model, xs.new_zeros(xs.shape[1]), means, reg)


def one_point_start(
    model: CovarianceModel, x: np.ndarray, indices: np.ndarray, reg: float
) -> Mixture:
    """The M-step of one chosen row per component, `indices` `[K]` (repeats allowed: a row
    may start several components); for `tied`, scikit-learn's wide start (see the module
    docstring)."""
    if model.name != "tied":
        rows = [torch.tensor([index]) for index in indices.tolist()]
        return hard_start(model, x, rows, reg)
    xs = torch.as_tensor(x, dtype=torch.float64)
    masses = floored_masses(xs.new_ones(len(indices)))
    means = xs[torch.as_tensor(indices)] / masses[:, None]
    cov = (xs.T @ xs - (means * masses[:, None]).T @ means) / masses.sum()
    cov = sym(cov) + reg * eye(xs.shape[1], cov)
    return Mixture.from_covariances(model, masses / masses.sum(), means, cov)

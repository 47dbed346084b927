r"""k-means++ seeding and Lloyd's k-means in torch, drawing as scikit-learn does.

`kmeans_plusplus` and `kmeans_labels` follow `sklearn.cluster.kmeans_plusplus` and
`sklearn.cluster.KMeans(n_clusters, n_init=1, random_state=rng)` (algorithm `"lloyd"`) step
by step: the same draws from `rng` in the same order, the same greedy choice among
$2 + \lfloor\log K\rfloor$ candidates, the data centered first, the same empty-cluster
relocation (the rows farthest from their centers), the same stopping rule (labels unchanged,
or a squared center shift at most $10^{-4}$ times the mean feature variance) and the labels
of the final centers. They compute in float64 with the squared distances
$\lVert c\rVert^2 - 2\,x\cdot c$ from one matmul per pass, so the labels are
scikit-learn's except where two distances tie to rounding.

They replace scikit-learn's functions in the initialization for speed: on (100k, 32, 16),
scikit-learn's k-means++ seeding alone took 0.16-0.21 s on a shared 2-core Xeon (AVX-512), as
long as several of our EM passes, and its whole k-means 0.28-0.38 s.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["kmeans_labels", "kmeans_plusplus"]

_MAX_ITER = 300
_TOL = 1e-4


def _augmented(x: Tensor) -> Tensor:
    r"""`[x, 1]`, `[N, D+1]`: one matmul then gives $-2\,x\cdot c + \lVert c\rVert^2$."""
    return torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)


def _center_operands(centers: Tensor) -> Tensor:
    r"""$\big[\begin{smallmatrix}-2C^\top \\ \lVert c\rVert^2\end{smallmatrix}\big]$,
    `[D+1, P]`."""
    return torch.cat([-2.0 * centers.T, (centers * centers).sum(dim=1).unsqueeze(0)], dim=0)


def _seed_indices(x: Tensor, k: int, rng: np.random.RandomState) -> np.ndarray:
    """k-means++ seed rows of float64 `x` (scikit-learn's `_kmeans_plusplus`)."""
    n = x.shape[0]
    trials = 2 + int(np.log(k))
    augmented = _augmented(x)
    norms = (x * x).sum(dim=1, keepdim=True)
    first = rng.choice(n, p=np.full(n, 1.0) / n)
    indices = np.full(k, -1, dtype=int)
    indices[0] = first
    closest = torch.addmm(norms, augmented, _center_operands(x[first : first + 1]))
    closest = closest.clamp_min_(0.0).squeeze(1)
    potential = float(closest.sum())
    for c in range(1, k):
        draws = torch.as_tensor(rng.uniform(size=trials) * potential, dtype=x.dtype)
        candidates = torch.searchsorted(torch.cumsum(closest, dim=0), draws)
        candidates = candidates.clamp_max_(n - 1)
        distances = torch.addmm(norms, augmented, _center_operands(x[candidates]))
        distances = torch.minimum(distances.clamp_min_(0.0), closest.unsqueeze(1))
        potentials = distances.sum(dim=0)
        best = int(torch.argmin(potentials))
        potential = float(potentials[best])
        closest = distances[:, best].contiguous()
        indices[c] = int(candidates[best])
    return indices


def kmeans_plusplus(
    x: np.ndarray, k: int, rng: np.random.RandomState
) -> tuple[np.ndarray, np.ndarray]:
    """`(centers [K, D], indices [K])`: k-means++ seeds of `x`, as
    `sklearn.cluster.kmeans_plusplus(x, k, random_state=rng)` draws them."""
    xt = torch.as_tensor(x, dtype=torch.float64)
    indices = _seed_indices(xt, k, rng)
    return np.asarray(x)[indices], indices


def _assign(augmented: Tensor, centers: Tensor) -> Tensor:
    r"""The nearest center of every row of `augmented` (`[x, 1]`),
    $\arg\min_j \lVert c_j\rVert^2 - 2\,x\cdot c_j$."""
    return (augmented @ _center_operands(centers)).argmin(dim=1)


def _update(x: Tensor, labels: Tensor, centers: Tensor) -> Tensor:
    """The means of the rows of every label, an empty cluster moved to the row farthest from
    its center (scikit-learn's `_relocate_empty_clusters_dense`)."""
    k = centers.shape[0]
    counts = torch.bincount(labels, minlength=k).to(x.dtype)
    sums = torch.zeros_like(centers).index_add_(0, labels, x)
    empty = torch.nonzero(counts == 0).squeeze(1)
    if empty.numel() > 0:
        distances = ((x - centers[labels]) ** 2).sum(dim=1)
        if float(distances.max()) > 0:
            far = torch.topk(distances, empty.numel()).indices
            for new, row in zip(empty.tolist(), far.tolist(), strict=True):
                old = int(labels[row])
                sums[old] -= x[row]
                counts[old] -= 1
                sums[new] = x[row]
                counts[new] = 1
    nonzero = counts > 0
    return torch.where(nonzero[:, None], sums / counts.clamp_min(1)[:, None], centers * 0)


def kmeans_labels(x: np.ndarray, k: int, rng: np.random.RandomState) -> np.ndarray:
    """The labels `[N]` of `sklearn.cluster.KMeans(k, n_init=1, random_state=rng).fit(x)`."""
    x = np.asarray(x, dtype=np.float64)
    tol = float(np.var(x, axis=0).mean()) * _TOL
    xt = torch.as_tensor(x - x.mean(axis=0))
    centers = xt[torch.as_tensor(_seed_indices(xt, k, rng))]
    augmented = _augmented(xt)
    labels_old = torch.full((xt.shape[0],), -1, dtype=torch.int64)
    strict = False
    for _ in range(_MAX_ITER):
        labels = _assign(augmented, centers)
        new_centers = _update(xt, labels, centers)
        shift = float(((new_centers - centers) ** 2).sum())
        centers = new_centers
        if torch.equal(labels, labels_old):
            strict = True
            break
        if shift <= tol:
            break
        labels_old = labels
    if not strict:
        labels = _assign(augmented, centers)
    return labels.numpy()

r"""How much of its space a trained embedding uses: the collapse measures of E19's
cross-entropy network.

All read the held-out embeddings $e[N, D]$ through their covariance
$\Sigma = \frac{1}{N-1}\sum_i (e_i - \bar e)(e_i - \bar e)^\top$ with eigenvalues
$\lambda_1 \ge \dots \ge \lambda_D \ge 0$ and spectrum $p_j = \lambda_j / \sum_l \lambda_l$:

* `effective_rank`: $\exp H(p)$ (Roy and Vetterli 2007), between 1 (every input on one line) and
  $D$ (variance spread equally over every direction); scale-free, so an embedding that shrinks
  or grows as a whole keeps its rank, and one that folds the data onto few directions loses it;
* `rank_share`: `effective_rank` $/ D$;
* `dead_dims`: the share of directions with $\lambda_j < 10^{-3}\,\bar\lambda$ (a direction
  the data no longer vary along).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["DEAD_DIRECTION", "embedding_volume", "spectrum"]

DEAD_DIRECTION = 1e-3
"""A direction is dead when its variance is below this share of the mean variance."""


def spectrum(e: Tensor) -> Tensor:
    """The eigenvalues of the covariance of `e[N, D]` ($N \\ge 2$), in float64, descending,
    clipped at 0 (rounding can leave them at $-10^{-16}$)."""
    if e.dim() != 2 or e.shape[0] < 2:
        raise ValueError(f"e must be an [N >= 2, D] tensor, got shape {tuple(e.shape)}")
    e = e.detach().double()
    if not torch.isfinite(e).all():
        raise ValueError("e holds non-finite values")
    centred = e - e.mean(0, keepdim=True)
    cov = centred.T @ centred / (e.shape[0] - 1)
    return torch.linalg.eigvalsh(cov).flip(0).clamp_min(0.0)


def embedding_volume(e: Tensor) -> dict[str, float]:
    """`effective_rank`, `rank_share` and `dead_dims` of the embeddings `e[N, D]`; an embedding
    with no variance at all (every input on one point) reads rank 1, every direction dead."""
    lam = spectrum(e)
    d = lam.shape[0]
    total = float(lam.sum())
    if total <= 0.0:
        return {"effective_rank": 1.0, "rank_share": 1.0 / d, "dead_dims": 1.0}
    p = lam / total
    rank = math.exp(float(-torch.special.xlogy(p, p).sum()))
    dead = float((lam < DEAD_DIRECTION * total / d).double().mean())
    return {"effective_rank": rank, "rank_share": rank / d, "dead_dims": dead}

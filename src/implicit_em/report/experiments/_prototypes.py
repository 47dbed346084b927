"""The prototype classifier of E7 and the wrong-class competition read from its gradients."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from implicit_em.distances import SquaredEuclidean
from implicit_em.objectives import soft_targets
from implicit_em.report.experiments._neural import (
    MLPEncoder,
    entropy,
    spearman_rows,
)


class PrototypeClassifier(nn.Module):
    """An MLP encoder and a distance head: `x -> d[..., K]` with $d_j = \\lVert h(x) - \\mu_j\\rVert^2$."""

    def __init__(self, in_features: int, hidden: int, features: int, classes: int) -> None:
        super().__init__()
        self.encoder = MLPEncoder(in_features, hidden, features)
        self.head = SquaredEuclidean(features, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(x))


def wrong_class_entropy(r: Tensor, labels: Tensor) -> Tensor:
    r"""Entropy (nats) of the wrong-class responsibilities renormalized, per row:
    $H(w)$ with $w_j \propto r_j$ over $j \ne y$. `r[N, K]` -> `[N]`.

    A row whose wrong-class responsibilities are all zero (read from a float32 gradient, tiny
    ones cancel to exactly 0) has no such distribution: its entropy is NaN, and averages skip it.
    """
    wrong = r.scatter(1, labels[:, None], 0.0).clamp_min(0)
    total = wrong.sum(1, keepdim=True)
    h = entropy(wrong / torch.where(total > 0, total, torch.ones_like(total)))
    return torch.where(total[:, 0] > 0, h, torch.full_like(h, float("nan")))


def correction_concentration(grad_d: Tensor, labels: Tensor) -> Tensor:
    r"""How unevenly the wrong classes share the correction, per row: $1 - H(w)/\log(K-1)$
    with $w_j \propto \lvert\partial\ell/\partial d_j\rvert$ over $j \ne y$ (0: every
    wrong class pushed alike, uniform repulsion; 1: one wrong class takes it all). NaN for a
    row without wrong-class gradient. `grad_d[N, K]` -> `[N]`."""
    k = grad_d.shape[-1]
    return 1.0 - wrong_class_entropy(grad_d.abs(), labels) / math.log(k - 1)


def wrong_class_ranks(scores: Tensor, labels: Tensor) -> Tensor:
    """Per row, the ranks (0 = lowest) of the wrong classes' `scores[N, K]`, the correct class
    left out: `[N, K - 1]` (ties broken by class order)."""
    n, k = scores.shape
    wrong = torch.ones_like(scores, dtype=torch.bool).scatter(1, labels[:, None], False)
    kept = scores[wrong].view(n, k - 1)
    return torch.argsort(torch.argsort(kept, dim=1, stable=True), dim=1)


def competition(
    grad_d: Tensor, h: Tensor, prototypes: Tensor, labels: Tensor, smoothing: float
) -> dict[str, Tensor]:
    r"""Wrong-class responsibilities and the updates they drive, from one batch's gradient.

    Parameters
    ----------
    grad_d : Tensor
        $\partial L/\partial d$, `[B, K]`, of the batch-mean loss.
    h : Tensor
        The features, `[B, F]`.
    prototypes : Tensor
        The prototypes, `[K, F]`.
    labels : Tensor
        The classes, `[B]`.
    smoothing : float
        The label smoothing the loss used (it fixes the targets $t$).

    Returns
    -------
    dict of str to Tensor
        `R` (`[K]`, $\sum_{i:y_i\ne j} r_{ij}$), `U` (`[K]`, $\lVert u_j\rVert$),
        `batch_rho` (Spearman of `R` and `U` over the classes), `sample_rho` (`[B]`, Spearman
        of $r_{ij}$ and $\lVert\partial\ell_i/\partial\mu_j\rVert$ over each row's wrong
        classes) and `r`.
    """
    b, k = grad_d.shape
    t = soft_targets(grad_d, labels, smoothing)
    r = t - b * grad_d
    wrong = torch.ones_like(r, dtype=torch.bool).scatter(1, labels[:, None], False)
    g = torch.where(wrong, grad_d, torch.zeros_like(grad_d))
    u = -2.0 * (g.T @ h - g.sum(0)[:, None] * prototypes)
    big_r = torch.where(wrong, r, torch.zeros_like(r)).sum(0)
    big_u = u.norm(dim=1)
    per_sample = 2.0 * (b * grad_d).abs() * (h[:, None, :] - prototypes[None]).norm(dim=-1)
    sample_rho = spearman_rows(r[wrong].view(b, k - 1), per_sample[wrong].view(b, k - 1))
    batch_rho = spearman_rows(big_r[None], big_u[None])[0]
    return {"R": big_r, "U": big_u, "batch_rho": batch_rho, "sample_rho": sample_rho, "r": r}

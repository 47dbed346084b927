r"""Does an ordinary linear softmax head behave as distances? A prediction that can tell (m3).

The paper reads a network's outputs as distances, $z_j = -d_j$, so that
$r = \operatorname{softmax}(z)$ is a posterior over components and $\log\sum_j e^{z_j}$ a
log-density up to a constant. The objection m3 says the reading is imported, not derived: the
outputs may be mere scores. The responsibilities cannot tell the two apart: for a prototype head
$z_j = -\lVert h - \mu_j\rVert^2$ the term $-\lVert h\rVert^2$ is shared by every class, so its
softmax is a linear head's. Only the log-sum-exp, the density the distance reading promises,
can. Stated here before any run:

* **Along rays** the answer is fixed by the architecture, not by training: a ReLU network is
  piecewise linear, so a linear head's logits grow linearly in $\lambda$ on $\lambda x$ and its
  log-sum-exp rises on almost every ray (Hein et al., CVPR 2019), while a prototype head's falls
  as $-\lambda^2$. `far_from_data` measures it (`lse_rise_share`), as a check of the
  construction and not as evidence.
* **Off the data at the data's own norm** nothing in the architecture decides it: each held-out
  image with its pixels shuffled (`scrambled`) keeps its norm and its pixel histogram and leaves
  the image manifold. The distance reading predicts that the log-sum-exp, a log-density, is
  lower there than on the images themselves; the scores reading predicts no such order.
  Measured: `density_auroc`, the AUROC with which the log-sum-exp ranks each image above the
  scrambled ones.

A head whose logits are planted squared Mahalanobis distances to the class means under their
pooled covariance (`class_gaussian_logits`) has a Gaussian mixture's log-density for its
log-sum-exp; with its sign flipped it is the opposite. They are the known-answer controls of
`density_auroc`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.distances import SquaredEuclidean
from implicit_em.report.experiments._neural import MLPEncoder, minibatches

__all__ = [
    "HEADS",
    "HeadClassifier",
    "class_gaussian_logits",
    "density_auroc",
    "far_from_data",
    "scrambled",
    "train_head",
]

HEADS = ("linear", "distance")


class HeadClassifier(nn.Module):
    """An MLP encoder with a `linear` head ($z = Wh + b$) or a `distance` head
    ($z = -\\lVert h - \\mu\\rVert^2$). `forward(x)` returns the features and the logits."""

    def __init__(self, head: str, in_features: int, hidden: int, features: int, classes: int):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        self.encoder = MLPEncoder(in_features, hidden, features)
        self.linear = head == "linear"
        self.head = (
            nn.Linear(features, classes) if self.linear else SquaredEuclidean(features, classes)
        )

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.encoder(x)
        return h, self.head(h) if self.linear else -self.head(h)

    def logits(self, x: Tensor) -> Tensor:
        """The logits $z(x)$, computed without a graph."""
        with torch.no_grad():
            return self(x)[1]


def train_head(
    head: str, x: Tensor, y: Tensor, classes: int, seed: int, config: dict[str, Any]
) -> HeadClassifier:
    """Train a `HeadClassifier` by cross-entropy with Adam on minibatches of `(x, y)`.

    `config` gives `hidden`, `features`, `lr`, `batch` and `steps`.
    """
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = HeadClassifier(head, x.shape[1], config["hidden"], config["features"], classes)
    model = model.to(x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    for index in minibatches(len(y), config["batch"], config["steps"], generator):
        index = index.to(x.device)
        loss = nn.functional.cross_entropy(model(x[index])[1], y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model


def far_from_data(
    logits: Callable[[Tensor], Tensor], x: Tensor, scales: Sequence[float]
) -> dict[str, Any]:
    """Log-sum-exp and confidence of `logits` on `scale * x` for each scale (along rays).

    Returns the per-scale means `lse` and `confidence`, and `lse_rise_share`: the share of
    rows whose log-sum-exp at the largest scale exceeds that at the first.

    Raises
    ------
    ValueError
        If fewer than two scales are given or they do not increase.
    """
    scales = [float(s) for s in scales]
    if len(scales) < 2 or any(b <= a for a, b in itertools.pairwise(scales)):
        raise ValueError(f"scales must be at least two increasing numbers, got {scales}")
    lse, confidence = [], []
    for scale in scales:
        z = logits(scale * x).double()
        lse.append(torch.logsumexp(z, dim=1))
        confidence.append(torch.softmax(z, dim=1).amax(1))
    return {
        "scales": scales,
        "lse": [float(v.mean()) for v in lse],
        "confidence": [float(v.mean()) for v in confidence],
        "lse_rise_share": float((lse[-1] > lse[0]).double().mean()),
    }


def scrambled(x: Tensor, seed: int) -> Tensor:
    """Each row of `x[N, D]` with its entries shuffled by its own random permutation drawn from
    `seed`: the same norm and the same values, off the data's manifold."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.argsort(torch.rand(x.shape, generator=generator), dim=1).to(x.device)
    return torch.gather(x, 1, order)


def density_auroc(logits: Callable[[Tensor], Tensor], x: Tensor, x_far: Tensor) -> float:
    r"""AUROC with which $\log\sum_j e^{z_j}$ ranks the rows of `x` above those of `x_far`:
    $P(\mathrm{LSE}(x) > \mathrm{LSE}(x'))$ over pairs, ties counted half (scikit-learn's
    `roc_auc_score`). 1 when the log-sum-exp falls off the data, 0 when it rises."""
    from sklearn.metrics import roc_auc_score

    scores = torch.cat([torch.logsumexp(logits(v).double(), dim=1) for v in (x, x_far)])
    labels = torch.cat([torch.ones(len(x)), torch.zeros(len(x_far))])
    return float(roc_auc_score(labels.numpy(), scores.cpu().numpy()))


def class_gaussian_logits(
    x: Tensor, y: Tensor, classes: int, sign: float = 1.0, shrink: float = 0.1
) -> Callable[[Tensor], Tensor]:
    r"""Planted distance logits $z_j(v) = -\mathrm{sign}\cdot\tfrac12 (v - \bar x_j)^\top
    \Sigma^{-1} (v - \bar x_j)$: squared Mahalanobis distances to the class means of `(x, y)`
    under their pooled within-class covariance, shrunk towards its mean variance by `shrink`
    ($\Sigma = (1 - s)S + s\,\tfrac{\operatorname{tr}S}{D} I$). For `sign = 1` the
    log-sum-exp is the log-density of a tied Gaussian mixture up to a constant; for -1 its
    opposite."""
    means = torch.stack([x[y == c].mean(0) for c in range(classes)]).double()
    centred = x.double() - means[y]
    within = centred.T @ centred / (len(x) - classes)
    dim = within.shape[0]
    eye = torch.eye(dim, dtype=within.dtype, device=within.device)
    cov = (1 - shrink) * within + shrink * torch.trace(within) / dim * eye
    whiten = torch.linalg.cholesky(torch.linalg.inv(cov))

    def logits(v: Tensor) -> Tensor:
        return -sign * 0.5 * torch.cdist(v.double() @ whiten, means @ whiten) ** 2

    return logits

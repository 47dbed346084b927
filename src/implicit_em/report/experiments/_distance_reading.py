r"""Does an ordinary linear softmax head behave as distances? Two predictions (m3).

The paper reads a network's outputs as distances, $z_j = -d_j$, so that
$r = \operatorname{softmax}(z)$ is a posterior over components and $\log\sum_j e^{z_j}$ a
log-density up to a constant. The objection m3 says the reading is imported, not derived: the
outputs may be mere scores. The two readings differ on two things that can be measured on a
trained linear head $z = W h(x) + b$ over a ReLU encoder $h$, stated here before any run:

1. **Far from the data.** Distance reading: the density falls away from the data, so
   $\log\sum_j e^{z_j(\lambda x)}$ falls as the input is scaled by $\lambda > 1$ (inputs are
   centred on the training mean, so scaling moves them away from it). Scores reading: a ReLU
   network is piecewise linear, $z(\lambda x)$ grows linearly in $\lambda$ along a ray, so
   the log-sum-exp and the confidence grow with the input's norm (Hein et al., 2019).
   Measured: the share of held-out inputs whose log-sum-exp at $\lambda_{\max}$ exceeds that at
   $\lambda = 1$ (`lse_rise_share`), and the mean confidence at $\lambda_{\max}$.
2. **Class order.** Distance reading: the logits order the classes as a fitted distance
   model does. Fit class-conditional Gaussians with one shared covariance to the training
   features (squared Mahalanobis distances $d^{\mathrm{fit}}_j$, see
   `_open_set_scores.class_mahalanobis`); on held-out inputs the Spearman rank correlation of
   $z$ with $-d^{\mathrm{fit}}$ over the classes should be high (`rank_agreement`). Scores
   reading: no such constraint.

A prototype (distance) head $z_j = -\lVert h - \mu_j\rVert^2$ is the control: for it the
log-sum-exp falls far from the data by construction.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.distances import SquaredEuclidean
from implicit_em.report.experiments._neural import MLPEncoder, minibatches, spearman_rows
from implicit_em.report.experiments._open_set_scores import class_mahalanobis

__all__ = ["HeadClassifier", "far_from_data", "rank_agreement", "train_head"]

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


def far_from_data(model: HeadClassifier, x: Tensor, scales: Sequence[float]) -> dict[str, Any]:
    """Log-sum-exp and confidence of `model` on `scale * x` for each scale (prediction 1).

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
    with torch.no_grad():
        for scale in scales:
            z = model(scale * x)[1].double()
            lse.append(torch.logsumexp(z, dim=1))
            confidence.append(torch.softmax(z, dim=1).amax(1))
    return {
        "scales": scales,
        "lse": [float(v.mean()) for v in lse],
        "confidence": [float(v.mean()) for v in confidence],
        "lse_rise_share": float((lse[-1] > lse[0]).double().mean()),
    }


def rank_agreement(
    model: HeadClassifier, x_train: Tensor, y_train: Tensor, x: Tensor, classes: int
) -> float:
    """Mean over the rows of `x` of the Spearman correlation between the logits and
    $-d^{\\mathrm{fit}}$, the negated distances of a tied-covariance Gaussian fitted to the
    training features (prediction 2). Rows where either side is constant are left out."""
    with torch.no_grad():
        h_train = model(x_train)[0]
        h, z = model(x)
    fitted = -class_mahalanobis(h_train, y_train, h, classes)
    rho = spearman_rows(z.double(), fitted)
    return float(rho[~torch.isnan(rho)].mean())

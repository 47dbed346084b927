"""Models of E8: the heads with and without a null component, the smoothing ablation, and the
scores of a trained model (computed by `_open_set_scores`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.core import lse, responsibilities
from implicit_em.distances import SquaredEuclidean
from implicit_em.objectives import NullComponent, append_null, cross_entropy, null_responsibility
from implicit_em.report.experiments._neural import (
    MLPEncoder,
    minibatches,
)
from implicit_em.report.experiments._open_set_scores import knn, logit_scores, mahalanobis

MODELS = {
    "softmax": "linear softmax head",
    "distance": "distance (prototype) head",
    "null": "distance head + null component",
    "smoothing": "distance head + label smoothing, no null (ablation)",
}
SCORES = {
    "msp": "max softmax probability",
    "energy": "energy (−logsumexp)",
    "max_logit": "max logit",
    "mahalanobis": "Mahalanobis (features)",
    "knn": "nearest neighbour (normalized features)",
    "null": "null responsibility r₀",
}
CONFIDENT = 0.9
"""The closed-world claim counts unknown inputs given to a known class with more than this."""


class OpenSetClassifier(nn.Module):
    """An MLP encoder with a `softmax`, `distance` or `null` head (see the module docstring).

    `forward(x)` returns the features `h` and the logits over the known classes
    ($z = Wh + b$, or $z = -d$).
    """

    def __init__(
        self, kind: str, in_features: int, hidden: int, features: int, classes: int, d0: float
    ) -> None:
        super().__init__()
        if kind not in MODELS:
            raise ValueError(f"kind must be one of {sorted(MODELS)}, got {kind!r}")
        self.kind = kind
        self.encoder = MLPEncoder(in_features, hidden, features)
        self.head: nn.Module = (
            nn.Linear(features, classes)
            if kind == "softmax"
            else SquaredEuclidean(features, classes)
        )
        self.null = NullComponent(d0, learnable=True) if kind == "null" else None

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.encoder(x)
        out = self.head(h)
        return h, out if self.kind == "softmax" else -out

    def loss(self, x: Tensor, y: Tensor, null_target: float) -> Tensor:
        _, z = self(x)
        if self.kind == "softmax":
            return torch.nn.functional.cross_entropy(z, y)
        d = -z
        if self.kind == "smoothing":
            return cross_entropy(d, y, label_smoothing=null_target)
        if self.null is None:
            return cross_entropy(d, y)
        extended = self.null(d)
        k = d.shape[-1]
        target = torch.nn.functional.one_hot(y, k + 1).to(d.dtype) * (1.0 - null_target)
        target[:, k] += null_target
        return cross_entropy(extended, target)


def evaluate(
    model: OpenSetClassifier,
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    config: dict[str, Any],
) -> dict[str, Any]:
    """Every score of `model` on `x_test`, its predictive distribution, and the null check."""
    with torch.no_grad():
        h_train, _ = model(x_train)
        h, z = model(x_test)
    z = z.double()
    classes = z.shape[1]
    p = torch.softmax(z, dim=1)
    scores = {
        **logit_scores(z),
        "mahalanobis": mahalanobis(h_train, y_train, h, classes),
        "knn": knn(h_train[: config["knn_bank"]], h),
    }
    result: dict[str, Any] = {"predicted": p.argmax(1)}
    if model.null is None:
        result["confidence"] = p.amax(1)
    else:
        d = -z
        d0 = model.null.d0.detach().double()
        extended = responsibilities(append_null(d, d0))
        closed_form = null_responsibility(d, d0)
        r0 = extended[:, -1]
        scores["null"] = r0
        order = torch.argsort(scores["energy"], stable=True)
        energy_sorted, r0_sorted = scores["energy"][order], r0[order]
        rising = energy_sorted[1:] > energy_sorted[:-1]
        result["null_check"] = {
            "closed_form_error": float((r0 - closed_form).abs().max()),
            "closed_form_lse_error": float((closed_form - torch.sigmoid(-d0 - lse(d))).abs().max()),
            "rank_violations": int(((r0_sorted[1:] < r0_sorted[:-1]) & rising).sum()),
            "d0": float(d0),
        }
        result["confidence"] = extended[:, :-1].amax(1)
    result["scores"] = {k: v.cpu().numpy() for k, v in scores.items()}
    return result


def train_model(
    kind: str, x: Tensor, y: Tensor, classes: int, seed: int, config: dict[str, Any]
) -> OpenSetClassifier:
    """Train one open-set classifier on the known classes `(x, y)`."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = OpenSetClassifier(
        kind, x.shape[1], config["hidden"], config["features"], classes, config["d0_init"]
    )
    model = model.to(x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    for index in minibatches(len(y), config["batch"], config["steps"], generator):
        index = index.to(x.device)
        loss = model.loss(x[index], y[index], config["null_target"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model

"""Models, scores and open-set metrics of E8: the heads with and without a null component."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from implicit_em.core import lse, responsibilities
from implicit_em.distances import SquaredEuclidean
from implicit_em.objectives import NullComponent, append_null, cross_entropy, null_responsibility
from implicit_em.report.experiments._neural import (
    MLPEncoder,
    minibatches,
)

MODELS = {
    "softmax": "linear softmax head",
    "distance": "distance (prototype) head",
    "null": "distance head + null component",
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


def open_set_metrics(score: np.ndarray, unknown: np.ndarray) -> dict[str, float]:
    r"""AUROC, AUPR-in, AUPR-out and FPR at 95% TPR of a score for "unknown" (scikit-learn).

    Convention: unknown inputs are the positive class and a larger `score` means "more likely
    unknown". `aupr_out` is the average precision of detecting unknowns; `aupr_in` that of
    detecting knowns with `-score`; `fpr95` is the share of known inputs flagged at the
    smallest threshold that flags 95% of the unknowns.
    """
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

    score = np.asarray(score, dtype=np.float64)
    unknown = np.asarray(unknown, dtype=bool)
    if score.shape != unknown.shape or score.ndim != 1:
        raise ValueError("score and unknown must be 1-D arrays of the same length")
    if unknown.all() or not unknown.any():
        raise ValueError("open-set metrics need both known and unknown inputs")
    if not np.isfinite(score).all():
        raise ValueError("score has non-finite values")
    # Every threshold is kept: a dropped collinear point may be the first to reach 95% TPR.
    fpr, tpr, _ = roc_curve(unknown, score, drop_intermediate=False)
    return {
        "auroc": float(roc_auc_score(unknown, score)),
        "aupr_in": float(average_precision_score(~unknown, -score)),
        "aupr_out": float(average_precision_score(unknown, score)),
        "fpr95": float(fpr[np.searchsorted(tpr, 0.95, side="left")]),
    }


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
        if self.null is None:
            return cross_entropy(d, y)
        extended = self.null(d)
        k = d.shape[-1]
        target = torch.nn.functional.one_hot(y, k + 1).to(d.dtype) * (1.0 - null_target)
        target[:, k] += null_target
        return cross_entropy(extended, target)


def _mahalanobis(h_train: Tensor, y_train: Tensor, h: Tensor, classes: int) -> Tensor:
    """Squared Mahalanobis distance of `h` to the nearest class mean (shared covariance)."""
    h_train, h = h_train.double(), h.double()
    means = torch.zeros(classes, h.shape[1], dtype=h.dtype, device=h.device).index_add_(
        0, y_train, h_train
    )
    means = means / torch.bincount(y_train, minlength=classes).clamp_min(1)[:, None].to(h.dtype)
    centred = h_train - means[y_train]
    cov = centred.T @ centred / len(h_train)
    cov = cov + 1e-6 * cov.diagonal().mean() * torch.eye(
        cov.shape[0], dtype=h.dtype, device=h.device
    )
    chol = torch.linalg.cholesky(cov)
    diff = (h[:, None, :] - means[None]).reshape(-1, h.shape[1])
    white = torch.linalg.solve_triangular(chol, diff.T, upper=False)
    return (white**2).sum(0).reshape(len(h), classes).amin(1)


def _nearest(bank: Tensor, h: Tensor, chunk: int = 2048) -> Tensor:
    """Euclidean distance of each L2-normalized row of `h` to its nearest normalized bank row."""
    bank = torch.nn.functional.normalize(bank.double(), dim=1)
    h = torch.nn.functional.normalize(h.double(), dim=1)
    best = torch.cat([(h[i : i + chunk] @ bank.T).amax(1) for i in range(0, len(h), chunk)])
    return torch.sqrt((2.0 - 2.0 * best).clamp_min(0.0))


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
        "msp": -p.amax(1),
        "energy": -torch.logsumexp(z, dim=1),
        "max_logit": -z.amax(1),
        "mahalanobis": _mahalanobis(h_train, y_train, h, classes),
        "knn": _nearest(h_train[: config["knn_bank"]], h),
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

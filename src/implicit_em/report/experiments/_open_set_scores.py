r"""Open-set scores and their metrics, as the OpenOOD benchmark defines them (E8's baselines).

Every score is a score for "unknown": larger means more likely unknown. From a classifier's
logits $z$ (for a distance head $z = -d$) and its penultimate features $h$:

| name          | score                                                                   |
| ------------- | ----------------------------------------------------------------------- |
| `msp`         | $-\max_j \operatorname{softmax}(z)_j$ (maximum softmax probability)     |
| `energy`      | $-\log\sum_j e^{z_j}$                                                   |
| `max_logit`   | $-\max_j z_j$                                                           |
| `mahalanobis` | $\min_c (h-m_c)^\top \Sigma^{-1} (h-m_c)$, class means $m_c$ and the    |
|               | shared (tied) covariance $\Sigma$ of the training features              |
| `knn`         | distance of $h/\lVert h\rVert$ to its $k$-th nearest normalized         |
|               | training feature                                                        |

Unknown inputs are the positive class of every metric: AUROC, FPR at 95% TPR (the share of
known inputs flagged at the threshold that first flags 95% of the unknowns) and the average
precision of detecting unknowns (AUPR-out) and knowns (AUPR-in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "BASELINES",
    "best_baseline_gaps",
    "class_mahalanobis",
    "energy",
    "knn",
    "logit_scores",
    "mahalanobis",
    "max_logit",
    "msp",
    "open_set_metrics",
]

BASELINES = ("msp", "energy", "max_logit", "mahalanobis", "knn")
"""The scores a null component must beat, by their OpenOOD names."""


def msp(z: Tensor) -> Tensor:
    r"""$-\max_j \operatorname{softmax}(z)_j$ per row of logits `z[N, K]`."""
    return -torch.softmax(z.double(), dim=-1).amax(-1)


def energy(z: Tensor) -> Tensor:
    r"""The energy $-\log\sum_j e^{z_j}$ per row of logits `z[N, K]`."""
    return -torch.logsumexp(z.double(), dim=-1)


def max_logit(z: Tensor) -> Tensor:
    r"""$-\max_j z_j$ per row of logits `z[N, K]`."""
    return -z.double().amax(-1)


def logit_scores(z: Tensor) -> dict[str, Tensor]:
    """The three scores read from the logits alone: `msp`, `energy`, `max_logit`."""
    return {"msp": msp(z), "energy": energy(z), "max_logit": max_logit(z)}


def class_mahalanobis(h_train: Tensor, y_train: Tensor, h: Tensor, classes: int) -> Tensor:
    r"""Squared Mahalanobis distance of each row of `h` to every class mean, `[N, classes]`.

    $(h-m_c)^\top\Sigma^{-1}(h-m_c)$ with the class means $m_c$ of `h_train` and the tied
    covariance $\Sigma = \frac1N\sum_i (h_i - m_{y_i})(h_i - m_{y_i})^\top$ plus a ridge of
    $10^{-6}$ times its mean variance: the distances of a fitted Gaussian classifier with one
    shared covariance (linear discriminant analysis). Float64.

    Raises
    ------
    ValueError
        If a class in `range(classes)` has no training row.
    """
    h_train, h = h_train.double(), h.double()
    counts = torch.bincount(y_train, minlength=classes)
    if bool((counts == 0).any()):
        raise ValueError(f"every class in range({classes}) needs a training row, got {counts}")
    means = torch.zeros(classes, h.shape[1], dtype=h.dtype, device=h.device)
    means = means.index_add_(0, y_train, h_train) / counts[:, None].to(h.dtype)
    centred = h_train - means[y_train]
    cov = centred.T @ centred / len(h_train)
    eye = torch.eye(cov.shape[0], dtype=h.dtype, device=h.device)
    chol = torch.linalg.cholesky(cov + 1e-6 * cov.diagonal().mean() * eye)
    diff = (h[:, None, :] - means[None]).reshape(-1, h.shape[1])
    white = torch.linalg.solve_triangular(chol, diff.T, upper=False)
    return (white**2).sum(0).reshape(len(h), classes)


def mahalanobis(h_train: Tensor, y_train: Tensor, h: Tensor, classes: int) -> Tensor:
    """The Mahalanobis score (Lee et al., 2018, without input preprocessing): the smallest of
    [class_mahalanobis][] over the classes, per row of `h`."""
    return class_mahalanobis(h_train, y_train, h, classes).amin(1)


def knn(bank: Tensor, h: Tensor, k: int = 1, chunk: int = 2048) -> Tensor:
    r"""Euclidean distance of each L2-normalized row of `h` to its `k`-th nearest normalized
    row of `bank` (Sun et al., 2022), $\sqrt{2 - 2\cos}$. Float64.

    Raises
    ------
    ValueError
        If `k` is not in `[1, len(bank)]`.
    """
    if not 1 <= k <= len(bank):
        raise ValueError(f"k must be in [1, {len(bank)}] (the bank's rows), got {k}")
    bank = torch.nn.functional.normalize(bank.double(), dim=1)
    h = torch.nn.functional.normalize(h.double(), dim=1)
    cosine = torch.cat(
        [(h[i : i + chunk] @ bank.T).topk(k, dim=1).values[:, -1] for i in range(0, len(h), chunk)]
    )
    return torch.sqrt((2.0 - 2.0 * cosine).clamp_min(0.0))


def open_set_metrics(score: np.ndarray, unknown: np.ndarray) -> dict[str, float]:
    """AUROC, AUPR-in, AUPR-out and FPR at 95% TPR of a score for "unknown" (scikit-learn).

    Raises
    ------
    ValueError
        If `score` and `unknown` are not 1-D of one length, one class is missing, or a score is
        not finite.
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


def best_baseline_gaps(
    candidate: Sequence[float], baselines: Mapping[str, Sequence[float]]
) -> tuple[list[float], list[str]]:
    """Per unit (seed), the candidate's AUROC minus the best baseline's, and that baseline.

    `candidate[i]` and every `baselines[name][i]` come from the same seed (same backbone
    training seed and splits), so the gap is paired. A NaN baseline makes the gap NaN (it is
    never skipped).

    Raises
    ------
    ValueError
        If there are no baselines or the lists differ in length.
    """
    if not baselines:
        raise ValueError("baselines must name at least one score")
    n = len(candidate)
    if any(len(v) != n for v in baselines.values()):
        raise ValueError("every baseline needs one value per unit of the candidate")
    gaps, names = [], []
    for i in range(n):
        values = {name: float(v[i]) for name, v in baselines.items()}
        if any(np.isnan(v) for v in values.values()):
            gaps.append(float("nan"))
            names.append("n/a")
            continue
        name = max(values, key=values.__getitem__)
        gaps.append(float(candidate[i]) - values[name])
        names.append(name)
    return gaps, names

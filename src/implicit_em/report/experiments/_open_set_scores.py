r"""Open-set scores (detectors) and their metrics, each to its published definition (E8's
baselines).

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
|               | training feature (Sun et al., ICML 2022)                                |
| `vim`         | $\alpha\lVert (I-PP^\top)(h-u)\rVert - \log\sum_j e^{z_j}$, linear heads  |
|               | $z = Wh+b$ only (Wang et al., CVPR 2022; see [vim][])                    |
| `react`       | the energy of the logits recomputed from $\min(h, c)$, $c$ the 90th     |
|               | percentile of the training features (Sun et al., NeurIPS 2021)          |

MSP is Hendrycks and Gimpel (ICLR 2017), the energy Liu et al. (NeurIPS 2020, temperature 1),
the max logit Hendrycks et al. (ICML 2022), Mahalanobis Lee et al. (NeurIPS 2018, without
input preprocessing or feature ensembles).

Unknown inputs are the positive class of every metric: AUROC, FPR at 95% TPR (the share of
known inputs flagged at the threshold that first flags 95% of the unknowns) and the average
precision of detecting unknowns (AUPR-out) and knowns (AUPR-in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "DETECTORS",
    "chosen_on_validation",
    "class_mahalanobis",
    "energy",
    "knn",
    "logit_scores",
    "mahalanobis",
    "max_logit",
    "msp",
    "open_set_metrics",
    "react_clip",
    "react_energy",
    "vim",
]

DETECTORS = ("msp", "energy", "max_logit", "mahalanobis", "knn", "vim", "react")
"""The detectors every head without a null component is scored by (`vim` on linear heads)."""


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


def vim(
    h_train: Tensor, z_train: Tensor, h: Tensor, z: Tensor, weight: Tensor, bias: Tensor, dim: int
) -> Tensor:
    r"""ViM, the virtual-logit matching score (Wang et al., CVPR 2022), for a linear head
    $z = Wh + b$ (`weight[K, F]`, `bias[K]`). Float64.

    The origin $u = -W^{+}b$ (the pseudo-inverse) makes the logits linear in $h - u$. $P$ holds
    the `dim` leading eigenvectors of $\frac1N\sum_i (h_i-u)(h_i-u)^\top$ over `h_train`
    (uncentred: the covariance about $u$); the residual of a row is
    $\lVert (I - PP^\top)(h-u)\rVert$. The scale
    $\alpha = \sum_i \max_j z_{ij} / \sum_i \lVert (I-PP^\top)(h_i-u)\rVert$ over the
    training rows matches the virtual logit $\alpha\,\text{residual}$ to the logits; the score
    for "unknown" is the virtual logit minus the energy,
    $\alpha\lVert (I-PP^\top)(h-u)\rVert - \log\sum_j e^{z_j}$ (the official code's
    `-vlogit + energy` with its sign flipped).

    Raises
    ------
    ValueError
        If `dim` is not in `[1, F)`: the residual space must not be empty.
    """
    features = h.shape[1]
    if not 1 <= dim < features:
        raise ValueError(f"dim must be in [1, {features}) (the features), got {dim}")
    origin = -torch.linalg.pinv(weight.double()) @ bias.double()
    shifted = h_train.double() - origin
    _, vectors = torch.linalg.eigh(shifted.T @ shifted / len(shifted))
    residual_space = vectors[:, : features - dim]
    train_residual = (shifted @ residual_space).norm(dim=1)
    alpha = z_train.double().amax(1).sum() / train_residual.sum()
    residual = ((h.double() - origin) @ residual_space).norm(dim=1)
    return alpha * residual - torch.logsumexp(z.double(), dim=1)


def react_clip(h_train: Tensor, percentile: float = 90.0) -> Tensor:
    """ReAct's clip $c$: the `percentile`-th percentile of all entries of `h_train`. Float64."""
    return torch.quantile(h_train.double().flatten(), percentile / 100.0)


def react_energy(
    h_train: Tensor,
    h: Tensor,
    head: Callable[[Tensor], Tensor],
    percentile: float = 90.0,
    clip: Tensor | None = None,
) -> Tensor:
    r"""ReAct (Sun et al., NeurIPS 2021): the energy $-\log\sum_j e^{z_j}$ of the logits
    `head(min(h, c))`, with every feature clipped at $c$, the `percentile`-th percentile of all
    entries of `h_train` ([react_clip][]; `clip`, when given, is that value already computed).
    Float64."""
    c = react_clip(h_train, percentile) if clip is None else clip
    return energy(head(h.clamp(max=c.to(h.dtype))))


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


def chosen_on_validation(validation: Mapping[str, float]) -> str:
    """The baseline with the highest validation AUROC (the first of equals): the selection is
    made on validation inputs, never on the test inputs the comparison is judged on.

    Raises
    ------
    ValueError
        If there is no baseline or a validation AUROC is NaN.
    """
    if not validation:
        raise ValueError("validation must name at least one baseline")
    if any(np.isnan(v) for v in validation.values()):
        raise ValueError("a validation AUROC is NaN")
    return max(validation, key=validation.__getitem__)

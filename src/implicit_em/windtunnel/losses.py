r"""Training objectives of the wind tunnel, on the supervised positions, with distances $d = -z$.

For a target $t$ over the $K$ answers (one-hot for a sampled answer, the exact posterior for a
soft target):

| objective | loss per position | normalized? |
|---|---|---|
| `"ce"` | $d_y + \log\sum_k e^{-d_k}$ (`objectives.cross_entropy`) | yes (log-sum-exp) |
| `"softmax-brier"` | $\sum_k (\operatorname{softmax}(-d)_k - t_k)^2$ (`softmax_brier`) | yes (no log) |
| `"sigmoid"` | $\sum_k \mathrm{BCE}(\sigma(-d_k), t_k)$ (`objectives.sigmoid_bce`) | no |
| `"brier"` | $\sum_k (\sigma(-d_k) - t_k)^2$ (`sigmoid_brier`) | no |
| `"softmax-linear"` | $-\sum_k t_k \operatorname{softmax}(-d)_k$ (`softmax_linear`) | yes (no log) |
| `"sigmoid-linear"` | $\sum_k t_k(1 - \sigma(-d_k)) + (1 - t_k)\sigma(-d_k)$ (`sigmoid_linear`) | no |

The first four cross normalization (softmax or independent sigmoids) with the loss (log-loss or
Brier). All four are proper scoring rules: the expected loss under $t \sim p$ is minimized by
the posterior, $\operatorname{softmax}(-d) = p$ for the softmax objectives and
$\sigma(-d_k) = p_k$ for each answer alone for the sigmoid ones; only at that optimum do the
unnormalized outputs sum to one.

The last two are **improper**, the linear score and the absolute error: their expected loss
under $t \sim p$ is minimized by the argmax, $\operatorname{softmax}(-d) \to$ one-hot at
$\arg\max_k p_k$, and $\sigma(-d_k) \to \mathbb 1[p_k > \tfrac12]$, not by the posterior. They keep
their normalization (or its absence) and lose only properness: the realistic rival that the
wind tunnel's known-answer controls train where a criterion asks whether a loss reaches the
posterior.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.objectives import cross_entropy, sigmoid_bce, soft_targets
from implicit_em.windtunnel.tasks import Batch

__all__ = [
    "NORMALIZED",
    "OBJECTIVES",
    "UNNORMALIZED",
    "loss_fn",
    "sigmoid_brier",
    "sigmoid_linear",
    "softmax_brier",
    "softmax_linear",
]

NORMALIZED = ("ce", "softmax-brier", "softmax-linear")
"""Objectives whose outputs are read through a softmax."""
UNNORMALIZED = ("sigmoid", "brier", "sigmoid-linear")
"""Objectives whose outputs are independent sigmoids (normalized only to be evaluated)."""
OBJECTIVES = NORMALIZED + UNNORMALIZED
"""Every training objective a run can name (`RunConfig.objective`)."""


def sigmoid_brier(d: Tensor, target: Tensor) -> Tensor:
    r"""Mean over rows of $\sum_k (\sigma(-d_k) - t_k)^2$: independent per-answer squared errors.

    Parameters
    ----------
    d : Tensor
        Distances `[N, K]`.
    target : Tensor
        Answer indices `[N]` (one-hot targets) or probabilities `[N, K]`, read as the target
        distribution $t$ by `objectives.soft_targets`.

    Returns
    -------
    Tensor
        The scalar loss.

    Raises
    ------
    TypeError
        If `target` holds neither answer indices nor probabilities.
    ValueError
        If `target` does not fit `d` (see `objectives.soft_targets`).

    Notes
    -----
    $\partial/\partial d_k = -2(\sigma(-d_k) - t_k)\,\sigma(-d_k)(1 - \sigma(-d_k))$: answer $k$
    alone, as for `sigmoid_bce`; no responsibility couples the answers.
    """
    t = soft_targets(d, target)
    return ((torch.sigmoid(-d) - t) ** 2).sum(dim=-1).mean()


def softmax_brier(d: Tensor, target: Tensor) -> Tensor:
    r"""Mean over rows of $\sum_k (r_k - t_k)^2$ with $r = \operatorname{softmax}(-d)$: the Brier
    score of the normalized prediction (the same arguments as `sigmoid_brier`).

    Notes
    -----
    $\partial/\partial d_k = -2 r_k\bigl((r_k - t_k) - \sum_j r_j (r_j - t_j)\bigr)$: the answers are
    coupled through the normalizer, as under CE, but without CE's log.
    """
    t = soft_targets(d, target)
    return ((torch.softmax(-d, dim=-1) - t) ** 2).sum(dim=-1).mean()


def softmax_linear(d: Tensor, target: Tensor) -> Tensor:
    r"""Mean over rows of $-\sum_k t_k r_k$ with $r = \operatorname{softmax}(-d)$: the linear
    score, an improper scoring rule (the same arguments as `sigmoid_brier`).

    Notes
    -----
    Its expected value under $t \sim p$ is $-\sum_k p_k r_k$, minimized by putting all of $r$
    on $\arg\max_k p_k$: training drives the prediction to the argmax, not to $p$.
    """
    return -(torch.softmax(-d, dim=-1) * soft_targets(d, target)).sum(dim=-1).mean()


def sigmoid_linear(d: Tensor, target: Tensor) -> Tensor:
    r"""Mean over rows of $\sum_k t_k(1 - \sigma_k) + (1 - t_k)\sigma_k$ with
    $\sigma_k = \sigma(-d_k)$: independent per-answer absolute errors $\lvert\sigma_k - y_k\rvert$,
    expected over the answer $y_k \sim \mathrm{Bernoulli}(t_k)$ (for a one-hot target, the absolute
    error itself), an improper scoring rule (the same arguments as `sigmoid_brier`).

    Notes
    -----
    The term is linear in $\sigma_k$: its expectation under $t_k = p_k$ is minimized by
    $\sigma_k = 1$ when $p_k > \tfrac12$ and by $\sigma_k = 0$ when $p_k < \tfrac12$, not by
    $p_k$.
    """
    t = soft_targets(d, target)
    s = torch.sigmoid(-d)
    return (t * (1 - s) + (1 - t) * s).sum(dim=-1).mean()


def loss_fn(logits: Tensor, batch: Batch, objective: str, targets: str) -> Tensor:
    """The training objective on the supervised positions (see the module)."""
    d = -logits[batch.mask]
    t = (
        batch.posterior[batch.mask].to(d.dtype)
        if targets == "posterior"
        else batch.target[batch.mask]
    )
    if objective == "ce":
        return cross_entropy(d, t)
    if objective == "sigmoid":
        return sigmoid_bce(d, t)
    if objective == "brier":
        return sigmoid_brier(d, t)
    if objective == "softmax-brier":
        return softmax_brier(d, t)
    if objective == "softmax-linear":
        return softmax_linear(d, t)
    if objective == "sigmoid-linear":
        return sigmoid_linear(d, t)
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")

r"""Training objectives of the wind tunnel, on the supervised positions, with distances $d = -z$.

For a target $t$ over the $K$ answers (one-hot for a sampled answer, the exact posterior for a
soft target):

| objective | loss per position | normalized? |
|---|---|---|
| `"ce"` | $d_y + \log\sum_k e^{-d_k}$ (`objectives.cross_entropy`) | yes (log-sum-exp) |
| `"softmax-brier"` | $\sum_k (\operatorname{softmax}(-d)_k - t_k)^2$ (`softmax_brier`) | yes (no log) |
| `"sigmoid"` | $\sum_k \mathrm{BCE}(\sigma(-d_k), t_k)$ (`objectives.sigmoid_bce`) | no |
| `"brier"` | $\sum_k (\sigma(-d_k) - t_k)^2$ (`sigmoid_brier`) | no |

The four cross normalization (softmax or independent sigmoids) with the loss (log-loss or
Brier). All four are proper scoring rules: the expected loss under $t \sim p$ is minimized by
the posterior, $\operatorname{softmax}(-d) = p$ for the softmax objectives and
$\sigma(-d_k) = p_k$ for each answer alone for the sigmoid ones; only at that optimum do the
unnormalized outputs sum to one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.objectives import cross_entropy, sigmoid_bce
from implicit_em.windtunnel.tasks import Batch

__all__ = ["loss_fn", "sigmoid_brier", "softmax_brier"]


def sigmoid_brier(d: Tensor, target: Tensor) -> Tensor:
    r"""Mean over rows of $\sum_k (\sigma(-d_k) - t_k)^2$: independent per-answer squared errors.

    Parameters
    ----------
    d : Tensor
        Distances `[N, K]`.
    target : Tensor
        Answer indices `[N]` (one-hot targets) or probabilities `[N, K]`.

    Returns
    -------
    Tensor
        The scalar loss.

    Notes
    -----
    $\partial/\partial d_k = -2(\sigma(-d_k) - t_k)\,\sigma(-d_k)(1 - \sigma(-d_k))$: answer $k$
    alone, as for `sigmoid_bce`; no responsibility couples the answers.
    """
    if target.is_floating_point():
        t = target.to(d.dtype)
    else:
        t = torch.nn.functional.one_hot(target, d.shape[-1]).to(d.dtype)
    return ((torch.sigmoid(-d) - t) ** 2).sum(dim=-1).mean()


def softmax_brier(d: Tensor, target: Tensor) -> Tensor:
    r"""Mean over rows of $\sum_k (r_k - t_k)^2$ with $r = \operatorname{softmax}(-d)$: the Brier
    score of the normalized prediction (the same arguments as `sigmoid_brier`).

    Notes
    -----
    $\partial/\partial d_k = -2 r_k\bigl((r_k - t_k) - \sum_j r_j (r_j - t_j)\bigr)$: the answers are
    coupled through the normalizer, as under CE, but without CE's log.
    """
    if target.is_floating_point():
        t = target.to(d.dtype)
    else:
        t = torch.nn.functional.one_hot(target, d.shape[-1]).to(d.dtype)
    return ((torch.softmax(-d, dim=-1) - t) ** 2).sum(dim=-1).mean()


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
    raise ValueError(
        f"objective must be 'ce', 'softmax-brier', 'sigmoid' or 'brier', got {objective!r}"
    )

r"""Errors in bits between a model's predictive distribution and the exact posterior.

For an exact posterior $p$ and a prediction $q$ over the same `K` answers
(last axis), with $0 \log 0 = 0$:

$$
H(p) = -\sum_k p_k \log_2 p_k, \qquad
\text{entropy error} = |H(q) - H(p)|, \qquad
\mathrm{KL}(p \,\|\, q) = \sum_k p_k (\log_2 p_k - \log_2 q_k).
$$

Predictions are given as log-probabilities (`log_q`) so that a confident model keeps its
precision. `position_errors` averages them over sequences at each position, and over every
supervised (sequence, position) pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from implicit_em.windtunnel.losses import NORMALIZED, UNNORMALIZED

__all__ = [
    "PositionErrors",
    "entropy_bits",
    "kl_bits",
    "position_errors",
    "predictive_log_probs",
    "sigma_sum_gap",
]

_LOG2 = math.log(2.0)


def entropy_bits(log_p: Tensor) -> Tensor:
    """$H(p)$ in bits from log-probabilities `log_p[..., K]` (`-inf` allowed)."""
    p = log_p.exp()
    terms = torch.where(p > 0, p * log_p, torch.zeros_like(p))
    return -terms.sum(dim=-1) / _LOG2


def kl_bits(p: Tensor, log_q: Tensor) -> Tensor:
    r"""$\mathrm{KL}(p\,\|\,q)$ in bits for probabilities `p` and log-probabilities `log_q`.

    Terms with $p_k = 0$ contribute 0; a $q_k = 0$ where $p_k > 0$ gives
    $+\infty$, as it should.
    """
    log_p = torch.log(p)
    terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p))
    return terms.sum(dim=-1) / _LOG2


def predictive_log_probs(logits: Tensor, objective: str) -> Tensor:
    r"""The model's normalized predictive $\log q$ from its logits (in float64).

    The softmax objectives (`losses.NORMALIZED`): $q = \operatorname{softmax}(z)$. The sigmoid ones (`losses.UNNORMALIZED`): the independent
    per-answer probabilities $\sigma(z_k)$ normalized at evaluation only,
    $q_k = \sigma(z_k) / \sum_j \sigma(z_j)$, i.e. $\log q = \log\operatorname{softmax}(\log\sigma(z))$.
    """
    z = logits.double()
    if objective in NORMALIZED:
        return torch.log_softmax(z, dim=-1)
    if objective in UNNORMALIZED:
        return torch.log_softmax(torch.nn.functional.logsigmoid(z), dim=-1)
    raise ValueError(f"objective must be one of {NORMALIZED + UNNORMALIZED}, got {objective!r}")


def sigma_sum_gap(logits: Tensor, mask: Tensor) -> float:
    r"""How far the unnormalized outputs are from a distribution: mean $|\sum_k \sigma(z_k) - 1|$.

    Averaged over the supervised positions (`mask[B, T]`) of `logits[B, T, K]`. Independent
    sigmoids trained by a proper scoring rule reach $\sum_k \sigma(z_k) = 1$ only at their
    optimum; the gap says how far from it the outputs are before evaluation normalizes them.
    """
    total = torch.sigmoid(logits.double()).sum(dim=-1)
    return float((total - 1.0).abs()[mask].mean())


@dataclass(frozen=True)
class PositionErrors:
    """Per-position errors in bits, averaged over sequences (`nan` where unsupervised).

    `entropy_mae[T]`: mean $|H(q)-H(p)|$; `kl[T]`: mean KL; `entropy[T]`: mean
    exact entropy $H(p)$; `supervised[T]`: whether position `t` is ever supervised.
    `bits_mae` and `kl_mean` average over every supervised (sequence, position) pair.
    """

    entropy_mae: Tensor
    kl: Tensor
    entropy: Tensor
    supervised: Tensor
    bits_mae: float
    kl_mean: float


def position_errors(posterior: Tensor, log_q: Tensor, mask: Tensor) -> PositionErrors:
    """Errors of predictions `log_q[B, T, K]` against `posterior[B, T, K]` where `mask[B, T]`."""
    p = posterior.double()
    log_q = log_q.double()
    h_p = entropy_bits(torch.log(p))
    abs_err = (entropy_bits(log_q) - h_p).abs()
    kl = kl_bits(p, log_q)
    m = mask.double()
    count = m.sum(dim=0)
    supervised = count > 0

    def per_position(x: Tensor) -> Tensor:
        total = torch.where(mask, x, torch.zeros_like(x)).sum(dim=0)
        return torch.where(supervised, total / count.clamp(min=1), torch.full_like(total, math.nan))

    n = m.sum().clamp(min=1)
    return PositionErrors(
        entropy_mae=per_position(abs_err),
        kl=per_position(kl),
        entropy=per_position(h_p),
        supervised=supervised,
        bits_mae=float(torch.where(mask, abs_err, torch.zeros_like(abs_err)).sum() / n),
        kl_mean=float(torch.where(mask, kl, torch.zeros_like(kl)).sum() / n),
    )

r"""Attention as the conditional regime, with its exact gradient decomposition.

For queries :math:`q_i`, keys :math:`k_j` and values :math:`v_j`:

.. math::
    s_{ij} = \frac{q_i^\top k_j}{\sqrt{d_k}}, \qquad
    \alpha_{ij} = \operatorname{softmax}_j(s_{ij}) = r_j(d_{i\cdot}) \text{ with } d_{ij} = -s_{ij},
    \qquad o_i = \sum_j \alpha_{ij} v_j .

Each query's weights are the responsibilities of the keys for that query (C5). Attention is a
layer, not a loss (R2): given the upstream gradient :math:`g_i = \partial L/\partial o_i`,

.. math::
    \frac{\partial L}{\partial v_j} = \sum_i \alpha_{ij}\, g_i, \qquad
    \frac{\partial L}{\partial s_{ij}} = \alpha_{ij}\,(a_{ij} - \bar a_i), \quad
    a_{ij} = g_i^\top v_j,\ \bar a_i = \sum_k \alpha_{ik} a_{ik},

the value update is responsibility-weighted and the scores follow an advantage law: a key gains
weight when its value beats the query's current average.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from implicit_em.core import responsibilities

__all__ = ["AttentionGradients", "attention", "attention_gradients", "attention_scores"]


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got dtype {t.dtype}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape [..., L, E], got {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share their last (feature) axis, got q {tuple(q.shape)} and "
            f"k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys (axis -2), got k {tuple(k.shape)} and "
            f"v {tuple(v.shape)}"
        )


def attention_scores(
    q: Tensor,
    k: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    r"""Scores :math:`s = q k^\top \cdot \text{scale} (+\text{mask})`, shape ``[..., Lq, Lk]``.

    ``mask`` follows ``scaled_dot_product_attention``: a boolean mask where True means "may
    attend" (False becomes :math:`-\infty`) or a float mask added to the scores.
    ``scale`` defaults to :math:`1/\sqrt{d_k}`.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal:
        causal = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~causal, float("-inf"))
    if mask is not None:
        if not isinstance(mask, Tensor):
            raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
        try:
            torch.broadcast_shapes(mask.shape, s.shape)
        except RuntimeError as err:
            raise ValueError(
                f"mask with shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                f"{tuple(s.shape)}"
            ) from err
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return s


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Scaled dot-product attention returning the output and the weights :math:`\alpha`.

    Args:
        q: queries ``[..., Lq, E]``; k: keys ``[..., Lk, E]``; v: values ``[..., Lk, Ev]``.
        mask: boolean (True = attend) or additive float mask broadcastable to ``[..., Lq, Lk]``.
        is_causal: apply a lower-triangular mask.
        scale: score scale, :math:`1/\sqrt{E}` by default.

    Returns:
        ``(o, alpha)`` with ``o = alpha @ v`` of shape ``[..., Lq, Ev]`` and ``alpha`` of shape
        ``[..., Lq, Lk]``, ``alpha = responsibilities(-s)``. Equal to
        ``F.scaled_dot_product_attention`` (math path) except on fully masked rows, where this
        returns zeros (the empty-mixture rule of :mod:`implicit_em.core`) instead of NaN.
    """
    _check_qkv(q, k, v)
    s = attention_scores(q, k, mask, is_causal, scale)
    alpha = responsibilities(-s)
    return alpha @ v, alpha


class AttentionGradients(NamedTuple):
    r"""The exact backward pass of attention given the upstream gradient :math:`g`.

    Attributes:
        values: :math:`\partial L/\partial v_j = \sum_i \alpha_{ij} g_i`, shape of ``v``.
        scores: :math:`\partial L/\partial s_{ij} = \alpha_{ij}(a_{ij}-\bar a_i)`, ``[..., Lq, Lk]``.
        queries: :math:`\partial L/\partial q_i = \text{scale}\sum_j \partial_{s_{ij}} L\, k_j`.
        keys: :math:`\partial L/\partial k_j = \text{scale}\sum_i \partial_{s_{ij}} L\, q_i`.
        advantage: :math:`a_{ij} - \bar a_i` (the advantage of value j for query i).
        alpha: the attention weights.
    """

    values: Tensor
    scores: Tensor
    queries: Tensor
    keys: Tensor
    advantage: Tensor
    alpha: Tensor


def attention_gradients(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    grad_output: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> AttentionGradients:
    r"""Closed-form gradients of a loss through :func:`attention`, given :math:`g = \partial L/\partial o`.

    ``grad_output`` has the shape of the attention output ``[..., Lq, Ev]``. The result equals
    autograd's (see identities 4 and 5 in :mod:`implicit_em.identities`).
    """
    _check_qkv(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = attention_scores(q, k, mask, is_causal, scale)
    alpha = responsibilities(-s)
    expected = (*alpha.shape[:-1], v.shape[-1])
    if grad_output.shape != expected:
        raise ValueError(
            f"grad_output must have the attention output's shape {tuple(expected)}, "
            f"got {tuple(grad_output.shape)}"
        )
    a = grad_output @ v.transpose(-2, -1)  # a_ij = g_i . v_j
    a_bar = (alpha * a).sum(dim=-1, keepdim=True)
    # Masked keys have alpha = 0; keep their (finite) advantage out of the products.
    advantage = torch.where(alpha > 0, a - a_bar, torch.zeros_like(a))
    grad_scores = alpha * advantage
    grad_values = alpha.transpose(-2, -1) @ grad_output
    grad_queries = scale * grad_scores @ k
    grad_keys = scale * grad_scores.transpose(-2, -1) @ q
    return AttentionGradients(grad_values, grad_scores, grad_queries, grad_keys, advantage, alpha)

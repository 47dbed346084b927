r"""Attention as the conditional regime, with its exact gradient decomposition.

For queries $q_i$, keys $k_j$ and values $v_j$:

$$
s_{ij} = \frac{q_i^\top k_j}{\sqrt{d_k}}, \qquad
\alpha_{ij} = \operatorname{softmax}_j(s_{ij}) = r_j(d_{i\cdot}) \text{ with } d_{ij} = -s_{ij},
\qquad o_i = \sum_j \alpha_{ij} v_j .
$$

Each query's weights are the responsibilities of the keys for that query (C5). Attention is a
layer, not a loss (R2): given the upstream gradient $g_i = \partial L/\partial o_i$,

$$
\frac{\partial L}{\partial v_j} = \sum_i \alpha_{ij}\, g_i, \qquad
\frac{\partial L}{\partial s_{ij}} = \alpha_{ij}\,(a_{ij} - \bar a_i), \quad
a_{ij} = g_i^\top v_j,\ \bar a_i = \sum_k \alpha_{ik} a_{ik},
$$

the value update is responsibility-weighted and the scores follow an advantage law: a key gains
weight when its value beats the query's current average.

Examples
--------
>>> import torch
>>> from implicit_em.attention import attention, attention_gradients
>>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
>>> out, alpha = attention(q, k, v)
>>> out.shape, alpha.shape
(torch.Size([2, 5, 8]), torch.Size([2, 5, 7]))
>>> parts = attention_gradients(q, k, v, torch.randn_like(out))
>>> parts.values.shape
torch.Size([2, 7, 8])
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
    r"""Attention scores $s = q k^\top \cdot \mathrm{scale}$, masked.

    Parameters
    ----------
    q : Tensor
        Queries, `[..., Lq, E]`.
    k : Tensor
        Keys, `[..., Lk, E]`.
    mask : Tensor or None, default=None
        As in `torch.nn.functional.scaled_dot_product_attention`: a boolean mask where True
        means "may attend" (False becomes $-\infty$), or a float mask added to the scores;
        broadcastable to `[..., Lq, Lk]`.
    is_causal : bool, default=False
        Mask every key after its query ($j > i$) with $-\infty$.
    scale : float or None, default=None
        The score scale; $1/\sqrt{E}$ when None.

    Returns
    -------
    Tensor
        Scores `[..., Lq, Lk]`.

    Raises
    ------
    TypeError
        If `mask` is not a tensor.
    ValueError
        If `mask` does not broadcast to the scores' shape.
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
    r"""Scaled dot-product attention returning the output and the weights $\alpha$.

    Parameters
    ----------
    q : Tensor
        Queries, `[..., Lq, E]`.
    k : Tensor
        Keys, `[..., Lk, E]`.
    v : Tensor
        Values, `[..., Lk, Ev]`.
    mask : Tensor or None, default=None
        Boolean (True = may attend) or additive float mask, broadcastable to `[..., Lq, Lk]`.
    is_causal : bool, default=False
        Apply a lower-triangular mask.
    scale : float or None, default=None
        The score scale; $1/\sqrt{E}$ when None.

    Returns
    -------
    o : Tensor
        The output $o = \alpha v$, `[..., Lq, Ev]`.
    alpha : Tensor
        The weights $\alpha$ = `responsibilities(-s)`, `[..., Lq, Lk]`.

    Raises
    ------
    TypeError
        If `q`, `k`, `v` are not floating tensors or `mask` is not a tensor.
    ValueError
        If the shapes of `q`, `k`, `v` or `mask` do not fit together.

    Notes
    -----
    Equal to `torch.nn.functional.scaled_dot_product_attention` (math path) except on fully
    masked rows, where this returns zeros (the empty-mixture rule of [implicit_em.core][])
    instead of NaN.
    """
    _check_qkv(q, k, v)
    s = attention_scores(q, k, mask, is_causal, scale)
    alpha = responsibilities(-s)
    return alpha @ v, alpha


class AttentionGradients(NamedTuple):
    r"""The exact backward pass of attention given the upstream gradient $g$.

    Returned by [attention_gradients][]; a named tuple of tensors.

    Attributes
    ----------
    values : Tensor
        $\partial L/\partial v_j = \sum_i \alpha_{ij} g_i$, the shape of `v`.
    scores : Tensor
        $\partial L/\partial s_{ij} = \alpha_{ij}(a_{ij}-\bar a_i)$, `[..., Lq, Lk]`.
    queries : Tensor
        $\partial L/\partial q_i = \mathrm{scale}\sum_j \partial_{s_{ij}} L\, k_j$, the shape of `q`.
    keys : Tensor
        $\partial L/\partial k_j = \mathrm{scale}\sum_i \partial_{s_{ij}} L\, q_i$, the shape of `k`.
    advantage : Tensor
        $a_{ij} - \bar a_i$, the advantage of value $j$ for query $i$ (0 for masked keys).
    alpha : Tensor
        The attention weights, `[..., Lq, Lk]`.
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
    r"""Closed-form gradients of a loss through [attention][], given $g = \partial L/\partial o$.

    Parameters
    ----------
    q, k, v, mask, is_causal, scale
        As in [attention][].
    grad_output : Tensor
        The upstream gradient $g$, of the attention output's shape `[..., Lq, Ev]`.

    Returns
    -------
    AttentionGradients
        The gradients with respect to the values, scores, queries and keys, the advantages and
        the weights. They equal autograd's (the identities `attention_values` and
        `attention_scores` in [implicit_em.identities][]).

    Raises
    ------
    TypeError
        If `q`, `k`, `v` are not floating tensors.
    ValueError
        If the shapes do not fit together or `grad_output` does not have the output's shape.
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

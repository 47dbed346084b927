r"""`F.multi_head_attention_forward` (what `nn.MultiheadAttention` runs): an attention site
whose weights are recomputed.

On the traced rows the site computes, at capture, the in-projections
$q = x_q W_q^\top + b_q$ (likewise $k$, $v$; one product for the packed self-attention
projection) and one additive mask from `attn_mask` and `key_padding_mask`; it keeps them, in
the layout of the call (sequence first), with the output projection $W_o, b_o$ and the output
$y$. At the flush they are split into heads,
$\alpha = \operatorname{softmax}(q k^\top/\sqrt{E_h} + m)$, the per-head output gradient is
$g = (\partial L/\partial y) W_o$, and the forward residual rebuilds
$y = \operatorname{merge}(\alpha v) W_o^\top + b_o$ (attention dropout, applied by the
module but not here, shows in it). `bias_k`/`bias_v`, `add_zero_attn`, static keys and
unbatched inputs are recorded as unmeasured, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.trace.attention_metrics import attention_stats_steps
from implicit_em.trace.metrics import (
    Stats,
    along,
    residual_tolerance,
)
from implicit_em.trace.sites.attention import (
    AttentionKind,
    attention_weights,
    forward_residual,
    weights_entropy_logit_max,
)
from implicit_em.trace.sites.base import Context, Kept, binder

__all__ = ["MultiheadAttention", "MultiheadKept"]

_MHA = binder(F.multi_head_attention_forward)


@dataclass(eq=False)
class MultiheadKept(Kept):
    r"""The projections `q`, `k` `[L, R, E]` and `v` `[Lk, R, Ev]` of the traced rows (at
    least float32, sequence first as in the call, heads not yet split), an additive `mask`
    broadcastable to `[R, H, Lq, Lk]` (or None), `output` $y$ `[Lq, R, E]`, `out_weight`
    `[E, E]`, `out_bias` `[E]` (or None), the number of `heads`; `g_output`
    $\partial L/\partial y$ `[Lq, R, E]` once the backward pass reached it."""

    q: Tensor
    k: Tensor
    v: Tensor
    mask: Tensor | None
    output: Tensor
    out_weight: Tensor
    out_bias: Tensor | None
    heads: int
    g_output: Tensor | None = None


class MultiheadAttention(AttentionKind):
    searched = "torch.nn.functional.multi_head_attention_forward (nn.MultiheadAttention)"
    functions = (F.multi_head_attention_forward,)
    # The per-head values are no tensor of the model: no autograd gradient to compare with.
    gradient_metrics = tuple(m for m in AttentionKind.gradient_metrics if m != "value_residual")

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        p = _MHA(args, kwargs)
        name = ctx.name("")
        if name is None:
            return
        reason = _unsupported(p)
        if reason:
            ctx.unmeasured(name, self, reason)
            return
        r, h = ctx.max_rows, p["num_heads"]
        with torch.no_grad():
            q, k, v = _projections(p, r)
            mask = _mask(p, r, h, q.shape[0], k.shape[0], q.dtype)
            mask = None if mask is None else ctx.keep(mask)
        y = out[0]
        kept = MultiheadKept(
            q=q,
            k=k,
            v=v,
            mask=mask,
            output=ctx.keep(y[:, :r]),
            out_weight=ctx.keep(p["out_proj_weight"]),
            out_bias=None if p["out_proj_bias"] is None else ctx.keep(p["out_proj_bias"]),
            heads=h,
        )
        ctx.add(name, self, kept)

        def g_output(g: Tensor) -> None:
            kept.g_output = ctx.keep(g[:, :r])

        ctx.on_gradient(y, g_output)

    def weights_and_values(self, kept: Kept) -> tuple[Tensor, Tensor | None]:
        q, k, v = (_split(t, kept.heads) for t in (kept.q, kept.k, kept.v))
        return attention_weights(q, k, kept.mask, False, None), v

    def statistics(self, k: Kept) -> Stats:
        q, kk, v = (_split(t, k.heads) for t in (k.q, k.k, k.v))
        alpha, head_entropy, logit_max = weights_entropy_logit_max(q, kk, k.mask, False, None)
        alpha, v = alpha.float(), v.float()
        s, _, h, _, ev = v.shape
        g = None
        if k.g_output is not None:  # [S, Lq·R, E] @ W_o (a batched product), as [S, R, H, Lq, Ev]
            gw = k.g_output.flatten(1, 2).float() @ k.out_weight.float()
            g = _split(gw.unflatten(1, k.g_output.shape[1:3]), h)
        stats = attention_stats_steps(alpha, v, g, head_entropy=head_entropy)
        # u . y = sum_h alpha_h (v_h w_h) + u . b_o with w = W_o^T u split into heads.
        w = along(k.out_weight.transpose(-2, -1)).reshape(s, 1, h, 1, ev)
        rebuilt = (alpha * (v * w).sum(-1).unsqueeze(-2)).sum(-1).sum(2)
        if k.out_bias is not None:
            rebuilt = rebuilt + along(k.out_bias).reshape(s, 1, 1)
        tolerance = residual_tolerance(k.output.dtype, s, k.output.device)
        return (
            stats
            | forward_residual(rebuilt, along(k.output.transpose(1, 2)))
            | {"tolerance_max": tolerance, "max_logit_max": logit_max}
        )


def _unsupported(p: dict) -> str | None:
    if p["query"].dim() != 3:
        return "unbatched input"
    if p["bias_k"] is not None or p["add_zero_attn"]:
        return "bias_k / add_zero_attn"
    if p["static_k"] is not None or p["static_v"] is not None:
        return "static keys or values"
    return None


def _projections(p: dict, r: int) -> tuple[Tensor, Tensor, Tensor]:
    r"""$x W^\top + b$ of the traced rows of query, key and value, each `[L, R, E']` in at
    least float32. Self-attention with the packed in-projection (the common case) is one
    product; its three parts are views of it."""
    weight, bias = p["in_proj_weight"], p["in_proj_bias"]
    dtype = torch.promote_types(p["query"].dtype, torch.float32)
    if not p["use_separate_proj_weight"] and p["query"] is p["key"] is p["value"]:
        packed = F.linear(p["query"][:, :r], weight, bias)
        return tuple(packed.to(dtype).chunk(3, dim=-1))
    x = [p[n][:, :r] for n in ("query", "key", "value")]
    biases = (None,) * 3 if bias is None else bias.chunk(3)
    if p["use_separate_proj_weight"]:
        weights = (p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"])
    else:
        weights = weight.chunk(3)
    return tuple(F.linear(*a).to(dtype) for a in zip(x, weights, biases, strict=True))


def _split(t: Tensor, h: int) -> Tensor:
    """`[..., L, R, E]` as `[..., R, H, L, E/H]`."""
    return t.unflatten(-1, (h, -1)).movedim(-4, -2)


def _mask(p: dict, r: int, h: int, lq: int, lk: int, dtype: torch.dtype) -> Tensor | None:
    """`attn_mask` and `key_padding_mask` of the traced rows as one additive mask
    `[R or 1, H or 1, Lq, Lk]` (boolean masks mark positions left out)."""
    parts = []
    m = p["attn_mask"]
    if m is not None:
        parts.append(m.reshape(-1, h, lq, lk)[:r] if m.dim() == 3 else m.reshape(1, 1, lq, lk))
    m = p["key_padding_mask"]
    if m is not None:
        parts.append(m[:r].reshape(-1, 1, 1, lk))
    mask = None
    for m in parts:
        if m.dtype == torch.bool:
            m = torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(m, -math.inf)
        mask = m.to(dtype) if mask is None else mask + m.to(dtype)
    return mask

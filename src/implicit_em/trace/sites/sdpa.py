r"""`F.scaled_dot_product_attention`: an attention site whose weights are recomputed.

Fused kernels never form $\alpha$, so the site keeps the traced rows of `q`, `k`,
`v`, the mask and the output, recomputes $\alpha = \operatorname{softmax}(s)$ at the
flush and checks it against the kernel's output (the forward residual of $o = \alpha v$).
Gradients: $g = \partial L/\partial o$ and autograd's $\partial L/\partial v$ on the
traced rows. Under attention dropout (`dropout`, the call's `dropout_p`, is recorded) the
output and $\partial L/\partial v$ use the dropped weights, so neither residual holds; the
statistics of the scores (entropy, largest logit, sink share) are those of the weights
before dropout, which dropout leaves unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

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
    heads,
    weights_entropy_logit_max,
)
from implicit_em.trace.sites.base import Context, Kept

__all__ = ["SDPA", "SDPAKept"]

_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


@dataclass(eq=False)
class SDPAKept(Kept):
    """`q`, `k` `[R, H, L, E]`, `v` and `output` `[R, H, L, Ev]`, a 4-D `mask`
    (or None), the call's `dropout_p`; `g` (output gradient) and `grad_v` once the backward
    pass reached them."""

    q: Tensor
    k: Tensor
    v: Tensor
    output: Tensor
    mask: Tensor | None
    is_causal: bool
    scale: float | None
    dropout_p: float
    g: Tensor | None = None
    grad_v: Tensor | None = None


class SDPA(AttentionKind):
    searched = "torch.nn.functional.scaled_dot_product_attention"
    metrics = (*AttentionKind.metrics, "dropout")
    functions = (F.scaled_dot_product_attention,)
    aliased: ClassVar[dict[Callable, tuple[int, str]]] = {
        F.scaled_dot_product_attention: (2, "value")
    }

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        p = dict(zip(_PARAMS, args, strict=False)) | kwargs
        name = ctx.name("")
        if name is None:
            return
        r = ctx.max_rows
        q, k, v = p["query"][:r], p["key"][:r], p["value"][:r]
        if p.get("enable_gqa") and k.shape[-3] != q.shape[-3]:
            k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
            v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
        mask = p.get("attn_mask")
        if isinstance(mask, Tensor):
            mask = mask[:r] if mask.dim() == p["query"].dim() else mask
            mask = ctx.keep(mask.reshape((1,) * (4 - mask.dim()) + mask.shape), "mask")
        else:
            mask = None
        kept = SDPAKept(
            q=heads(ctx.keep(q, "q")),
            k=heads(ctx.keep(k, "k")),
            v=heads(ctx.keep(v, "v")),
            output=heads(ctx.keep(out[:r], "output")),
            mask=mask,
            is_causal=bool(p.get("is_causal", False)),
            scale=p.get("scale"),
            dropout_p=float(p.get("dropout_p", 0.0)),
        )
        ctx.add(name, self, kept)

        def g(t: Tensor) -> None:
            kept.g = heads(ctx.keep(t[:r], "g"))

        def grad_v(t: Tensor) -> None:
            kept.grad_v = heads(ctx.keep(t[:r], "grad_v"))

        ctx.on_gradient(out, g)
        if not p.get("enable_gqa"):
            ctx.on_gradient(p["value"], grad_v)

    def weights_and_values(self, kept: Kept) -> tuple[Tensor, Tensor | None]:
        return attention_weights(kept.q, kept.k, kept.mask, kept.is_causal, kept.scale), kept.v

    def statistics(self, k: Kept) -> Stats:
        alpha, head_entropy, logit_max = weights_entropy_logit_max(
            k.q, k.k, k.mask, k.is_causal, k.scale
        )
        alpha, v = alpha.float(), k.v.float()
        grad_v = None if k.grad_v is None else k.grad_v.float()
        g = None if k.g is None else k.g.float()
        tolerance = residual_tolerance(k.q.dtype, k.q.shape[0], k.q.device)
        stats = attention_stats_steps(
            alpha, v, g, grad_v=grad_v, head_entropy=head_entropy, tolerance=tolerance
        )
        # u . o_i = sum_j alpha_ij (u . v_j), as a row vector times alpha^T (the faster product)
        rebuilt = (along(v).unsqueeze(-2) @ alpha.transpose(-2, -1)).squeeze(-2)
        dropout = torch.full_like(logit_max[..., 0], k.dropout_p, dtype=torch.float64)
        extra = {"tolerance_max": tolerance, "max_logit_max": logit_max, "dropout_max": dropout}
        return stats | forward_residual(rebuilt, along(k.output)) | extra

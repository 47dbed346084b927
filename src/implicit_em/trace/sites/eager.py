r"""Eager softmax attention: a softmax over the last axis of a tensor with three or more axes
(the weights $\alpha$), followed by a matmul with the values.

The weights are the model's own tensor, so nothing is recomputed: the site keeps the traced rows
of $\alpha$ and of $\partial L/\partial\alpha$ (the routing gradient is exact). The
weights are followed through elementwise steps (`to`, `where`, `masked_fill`,
`contiguous`, dropout) to the matmul $o = \tilde\alpha v$, which adds the weights used
(after dropout), the values, $g = \partial L/\partial o$ and autograd's
$\partial L/\partial v$.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.trace.attention_metrics import attention_stats_steps
from implicit_em.trace.metrics import Stats, residual_tolerance
from implicit_em.trace.sites.attention import AttentionKind, head_max, heads
from implicit_em.trace.sites.base import Context, Kept

__all__ = ["EagerAttention", "EagerKept"]

_SOFTMAX = (F.softmax, torch.softmax, Tensor.softmax)
_MATMUL = (torch.matmul, Tensor.matmul, Tensor.__matmul__, torch.bmm)
_CARRY = (torch.where, Tensor.to, Tensor.masked_fill, Tensor.contiguous, F.dropout)


@dataclass(eq=False)
class EagerKept(Kept):
    """`alpha` `[R, H, Lq, Lk]`, `logit_max` `[H]` (each head's largest finite input to the
    softmax, the scaled and masked scores); from the matmul `used` (the weights after dropout) and
    `v` `[R, H, Lk, Ev]`; gradients `grad_alpha`, `g` `[R, H, Lq, Ev]` and
    `grad_v` once the backward pass reached them."""

    alpha: Tensor
    logit_max: Tensor
    used: Tensor | None = None
    v: Tensor | None = None
    grad_alpha: Tensor | None = None
    g: Tensor | None = None
    grad_v: Tensor | None = None


class EagerAttention(AttentionKind):
    searched = "softmax over the last axis of a >=3-D tensor (eager attention)"
    functions = _SOFTMAX + _MATMUL + _CARRY

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        followed = ctx.scratch(self)
        if func in _SOFTMAX:
            self._softmax(ctx, followed, args, kwargs, out)
            return
        if not followed or not isinstance(out, Tensor):
            return
        first = args[0] if args else kwargs.get("input")
        entry = followed.get(id(first))
        if entry is None or entry[0]() is not first:
            if func is torch.where:
                for a in args[1:]:
                    entry = followed.get(id(a))
                    if entry is not None and entry[0]() is a and a.shape == out.shape:
                        break
                else:
                    return
            else:
                return
        kept = entry[1]
        if func in _MATMUL:
            if len(args) == 2 and kept.v is None:
                self._matmul(ctx, kept, args[0], args[1], out)
        elif out.shape == first.shape or func is torch.where:
            followed[id(out)] = (weakref.ref(out), kept)

    def _softmax(
        self, ctx: Context, followed: dict, args: Sequence, kwargs: dict, out: Tensor
    ) -> None:
        x = args[0]
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if not isinstance(x, Tensor) or x.dim() < 3 or dim not in (-1, x.dim() - 1):
            return
        name = ctx.name("")
        if name is None:
            return
        r = ctx.max_rows
        with torch.no_grad():
            scores = heads(x[:r].detach()).unsqueeze(0)
            logit_max = head_max(scores)[0]
        kept = EagerKept(alpha=heads(ctx.keep(out[:r], "alpha")), logit_max=logit_max)
        ctx.add(name, self, kept)
        followed[id(out)] = (weakref.ref(out), kept)

        def grad_alpha(g: Tensor) -> None:
            kept.grad_alpha = heads(ctx.keep(g[:r], "grad_alpha"))

        ctx.on_gradient(out, grad_alpha)

    def _matmul(self, ctx: Context, kept: EagerKept, used: Tensor, v: Tensor, out: Tensor) -> None:
        r = ctx.max_rows
        kept.used, kept.v = heads(ctx.keep(used[:r], "used")), heads(ctx.keep(v[:r], "v"))

        def g(t: Tensor) -> None:
            kept.g = heads(ctx.keep(t[:r], "g"))

        def grad_v(t: Tensor) -> None:
            kept.grad_v = heads(ctx.keep(t[:r], "grad_v"))

        ctx.on_gradient(out, g)
        ctx.on_gradient(v, grad_v)

    def weights_and_values(self, kept: Kept) -> tuple[Tensor, Tensor | None]:
        return kept.alpha, kept.v

    def statistics(self, k: Kept) -> Stats:
        alpha = k.alpha.float()
        v = None if k.v is None else k.v.float().expand(*alpha.shape[:-2], -1, -1)
        g = None if k.g is None or v is None else k.g.float()
        grad_v = k.grad_v
        grad_v = None if grad_v is None or v is None or grad_v.shape != v.shape else grad_v.float()
        tolerance = residual_tolerance(k.alpha.dtype, k.alpha.shape[0], k.alpha.device)
        return attention_stats_steps(
            alpha,
            v,
            g,
            None if k.grad_alpha is None else k.grad_alpha.float(),
            None if k.used is None else k.used.float(),
            grad_v,
            tolerance=tolerance,
        ) | {"tolerance_max": tolerance, "max_logit_max": k.logit_max.double()}

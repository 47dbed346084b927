r"""`F.cross_entropy` and `F.nll_loss` of a `log_softmax`: a classification site.

Kept: the logits as `[N, K]` rows, the class indices (with the class weights and
`ignore_index`) or the soft targets, the label smoothing and the reduction; the gradient of
the logits and the upstream gradient $u$ of the loss. The statistics form targets, row
weights $w_i$ and row factors $c_i = u\,w_i/\sum_i w_i$ (mean; $u\,w_i$ for a
sum, $u_i w_i$ for none) as `F.cross_entropy` forms its loss $\sum_i c_i\ell_i$,
and read $r = t + \nabla_z/c$.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.trace.metrics import Stats, Targets
from implicit_em.trace.sites.base import Context, Kept, binder
from implicit_em.trace.sites.responsibility import (
    ResponsibilityKind,
    responsibility_statistics,
    rows,
    to_float,
)

__all__ = ["CrossEntropy", "CrossEntropyKept"]

_CE = binder(F.cross_entropy)
_NLL = binder(F.nll_loss)
_LOG_SOFTMAX = (F.log_softmax, torch.log_softmax, Tensor.log_softmax)


@dataclass(eq=False)
class CrossEntropyKept(Kept):
    """`logits` `[N, K]`; class indices `labels` `[N]` (with `class_weight` `[K]`)
    or probabilities `target` `[N, K]`; `grad` `[N, K]` and `upstream` (the loss's
    shape) once the backward pass reached them."""

    logits: Tensor
    labels: Tensor | None
    target: Tensor | None
    class_weight: Tensor | None
    ignore_index: int
    smoothing: float
    reduction: str
    grad: Tensor | None = None
    upstream: Tensor | None = None


class CrossEntropy(ResponsibilityKind):
    type = "classification"
    searched = "torch.nn.functional.cross_entropy; torch.nn.functional.nll_loss of a log_softmax"
    functions = (F.cross_entropy, F.nll_loss, *_LOG_SOFTMAX)
    metrics = (
        "mass",
        "entropy",
        "effective_k",
        "dead",
        "dominance",
        "scale",
        "rows",
        "wrong_entropy",
        "wrong_top",
        "residual",
        "nonfinite",
    )
    gradient_metrics = ("residual", "wrong_entropy", "wrong_top")

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        if func in _LOG_SOFTMAX:
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if isinstance(out, Tensor) and isinstance(dim, int):
                ctx.scratch(self)[id(out)] = (weakref.ref(out), args[0], dim % out.dim())
            return
        if func is F.cross_entropy:
            p = _CE(args, kwargs)
            self._add(ctx, "ce", p["input"], p, float(p["label_smoothing"]), out)
            return
        p = _NLL(args, kwargs)
        entry = ctx.scratch(self).get(id(p["input"]))
        if entry is None or entry[0]() is not p["input"]:
            return
        _, z, dim = entry
        if dim == min(1, z.dim() - 1):
            self._add(ctx, "nll", z, p, 0.0, out)

    def _add(
        self, ctx: Context, suffix: str, z: Tensor, p: dict, smoothing: float, out: Tensor
    ) -> None:
        name = ctx.name(suffix, z)
        if name is None:
            return
        target, unbatched = p["target"], z.dim() == 1
        logits = z.unsqueeze(0) if unbatched else rows(z, 1)
        soft = target.is_floating_point()
        if soft:
            target = target.unsqueeze(0) if unbatched else rows(target, 1)
        kept = CrossEntropyKept(
            logits=ctx.keep(logits),
            labels=None if soft else ctx.keep(target.reshape(-1)),
            target=ctx.keep(target) if soft else None,
            class_weight=None if p["weight"] is None else ctx.keep(p["weight"]),
            ignore_index=p.get("ignore_index", -100),
            smoothing=smoothing,
            reduction=_reduction(p),
        )
        ctx.add(name, self, kept)

        def grad(g: Tensor) -> None:
            kept.grad = ctx.keep(g.unsqueeze(0) if unbatched else rows(g, 1))

        def upstream(u: Tensor) -> None:
            kept.upstream = ctx.keep(u)

        ctx.on_gradient(z, grad)
        ctx.on_gradient(out, upstream)

    def statistics(self, k: Kept) -> Stats:
        logits = to_float(k.logits)
        s, n = logits.shape[:2]
        if k.labels is not None:
            kept = k.labels != k.ignore_index
            index = torch.where(kept, k.labels, 0)
            if k.class_weight is not None:
                weight = k.class_weight.to(logits.dtype).gather(-1, index) * kept
            else:
                weight = kept.to(logits.dtype)
            target = Targets(labels=index, smoothing=k.smoothing)
        else:
            target = Targets(dense=k.target, smoothing=k.smoothing)
            weight = torch.ones(s, n, dtype=logits.dtype, device=logits.device)
        c = None
        if k.grad is not None:
            c = torch.zeros_like(weight)
            if k.upstream is not None:
                c = k.upstream.reshape(s, -1).to(logits.dtype) * weight
                if k.reduction == "mean":
                    c = c / weight.sum(-1, keepdim=True)
        return responsibility_statistics(logits, target, weight, c, k.grad, 1.0)


def _reduction(p: dict) -> str:
    """The reduction, also from the legacy `size_average` / `reduce` arguments."""
    size_average, reduce = p.get("size_average"), p.get("reduce")
    if size_average is None and reduce is None:
        return p["reduction"]
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"

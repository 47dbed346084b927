r"""`F.cross_entropy` and `F.nll_loss` of a `log_softmax`: a classification site.

Kept: the logits as `[N, K]` rows, the class indices (with the class weights and
`ignore_index`) or the soft targets, the label smoothing and the reduction; the gradient of
the logits and the upstream gradient $u$ of the loss. The statistics form targets, row
weights $w_i$ and row factors $c_i = u\,w_i/\sum_i w_i$ (mean; $u\,w_i$ for a
sum, $u_i w_i$ for none) as `F.cross_entropy` forms its loss $\sum_i c_i\ell_i$,
and read $r = t + \nabla_z/c$. A site with more rows than the tracer's
`max_responsibility_rows` keeps every `stride`-th row; the sum $\sum_i w_i$ of a mean and the
count of non-finite gradient rows are taken over all rows at capture.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.trace.metrics import Stats, Targets
from implicit_em.trace.sites.base import Context, Kept, binder
from implicit_em.trace.sites.responsibility import (
    RESPONSIBILITY_METRICS,
    ResponsibilityKind,
    keep_gradient_rows,
    responsibility_statistics,
    row_stride,
    rows,
    sample_rows,
    to_float,
)

__all__ = ["CrossEntropy", "CrossEntropyKept"]

_CE = binder(F.cross_entropy)
_NLL = binder(F.nll_loss)
_LOG_SOFTMAX = (F.log_softmax, torch.log_softmax, Tensor.log_softmax)


@dataclass(eq=False)
class CrossEntropyKept(Kept):
    r"""`logits` `[N, K]`; class indices `labels` `[N]` (with `class_weight` `[K]`)
    or probabilities `target` `[N, K]`, of the sampled rows; `weight_sum`, $\sum_i w_i$ over
    all rows of a site whose rows are sampled and with the mean reduction (else None: taken from
    the kept rows at the flush); `grad` `[N, K]`, `upstream` (the loss's shape, sampled rows
    for `"none"`) and, for a sampled site, `nonfinite` (rows of the whole gradient with a NaN or
    infinity) once the backward pass reached them."""

    logits: Tensor
    labels: Tensor | None
    target: Tensor | None
    class_weight: Tensor | None
    ignore_index: int
    smoothing: float
    reduction: str
    weight_sum: Tensor | None
    grad: Tensor | None = None
    upstream: Tensor | None = None
    nonfinite: Tensor | None = None


class CrossEntropy(ResponsibilityKind):
    type = "classification"
    searched = "torch.nn.functional.cross_entropy; torch.nn.functional.nll_loss of a log_softmax"
    functions = (F.cross_entropy, F.nll_loss, *_LOG_SOFTMAX)
    aliased: ClassVar[dict[Callable, tuple[int, str]]] = {
        F.cross_entropy: (0, "input")
    } | dict.fromkeys(_LOG_SOFTMAX, (0, "input"))
    metrics = (
        *RESPONSIBILITY_METRICS,
        "label_share",
        "log_z",
        "log_z_max",
        "label_logit",
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

        def as_rows(t: Tensor) -> Tensor:  # the class axis is 1, or 0 unbatched
            return t.unsqueeze(0) if unbatched else rows(t, 1)

        logits = as_rows(z)
        stride = row_stride(logits.shape[0], ctx.max_responsibility_rows)
        soft, ignore_index = target.is_floating_point(), p["ignore_index"]
        reduction = _reduction(p)
        target = as_rows(target) if soft else target.reshape(-1)
        weight_sum = None  # with every row kept, taken from the kept rows at the flush
        if stride > 1 and reduction == "mean":
            dtype = torch.promote_types(z.dtype, torch.float32)
            if soft:
                weight_sum = z.new_full((), target.shape[0], dtype=dtype)
            else:
                weight_sum = _weight_sum(target, p["weight"], ignore_index).to(dtype)
        kept = CrossEntropyKept(
            logits=ctx.keep(sample_rows(logits, stride)),
            labels=None if soft else ctx.keep(sample_rows(target, stride)),
            target=ctx.keep(sample_rows(target, stride)) if soft else None,
            class_weight=None if p["weight"] is None else ctx.keep(p["weight"]),
            ignore_index=ignore_index,
            smoothing=smoothing,
            reduction=reduction,
            weight_sum=weight_sum,
        )
        ctx.add(name, self, kept)

        def grad(g: Tensor) -> None:
            keep_gradient_rows(ctx, kept, as_rows(g), stride)

        def upstream(u: Tensor) -> None:
            kept.upstream = ctx.keep(sample_rows(u.reshape(-1), stride) if u.dim() else u)

        ctx.on_gradient(z, grad)
        ctx.on_gradient(out, upstream)

    def statistics(self, k: Kept) -> Stats:
        logits = to_float(k.logits)
        class_weight = None if k.class_weight is None else k.class_weight.to(logits.dtype)
        kept = None
        if k.labels is not None:
            kept = k.labels != k.ignore_index
            index = torch.where(kept, k.labels, 0)
            target = Targets(labels=index, smoothing=k.smoothing, class_weight=class_weight)
        else:
            target = Targets(dense=k.target, smoothing=k.smoothing, class_weight=class_weight)
        weight = target.row_weight(logits)
        if weight is None:
            weight = torch.ones(logits.shape[:2], dtype=logits.dtype, device=logits.device)
        if kept is not None:
            weight = weight * kept
        c = None
        if k.grad is not None:
            c = torch.zeros_like(weight)
            if k.upstream is not None:
                c = k.upstream.reshape(weight.shape[0], -1).to(logits.dtype) * weight
                if k.reduction == "mean":
                    c = c / _kept_weight_sum(k).to(c.dtype).unsqueeze(-1)
        return responsibility_statistics(logits, target, weight, c, k.grad, 1.0, k.nonfinite)


def _weight_sum(labels: Tensor, class_weight: Tensor | None, ignore_index: int) -> Tensor:
    r"""$\sum_i w_i$ over the rows `labels[..., N]`: the class weight (`[..., K]`) of each
    row's label (1 without class weights), 0 for an ignored row; shape `[...]`."""
    kept = labels != ignore_index
    if class_weight is None:
        return kept.sum(-1)
    return (class_weight.gather(-1, torch.where(kept, labels, 0)) * kept).sum(-1)


def _kept_weight_sum(k: CrossEntropyKept) -> Tensor:
    """The mean's divisor of stacked records `[S]`: taken at capture over all rows of a
    sampled site, else from the kept rows (which are all of them)."""
    if k.weight_sum is not None:
        return k.weight_sum
    if k.labels is None:
        return torch.full(k.target.shape[:1], k.target.shape[1], device=k.target.device)
    return _weight_sum(k.labels, k.class_weight, k.ignore_index)


def _reduction(p: dict) -> str:
    """The reduction, also from the legacy `size_average` / `reduce` arguments."""
    size_average, reduce = p.get("size_average"), p.get("reduce")
    if size_average is None and reduce is None:
        return p["reduction"]
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"

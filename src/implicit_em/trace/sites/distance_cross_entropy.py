r"""This package's `cross_entropy` over distances: a
classification site.

Announced through its hook point (`hook_point`) with the
per-sample loss $\ell_i = -\sum_j t_{ij}\log r_{ij}$, the distances `d`, the targets
`target` as formed (label smoothing included) and `dim`. Kept: the logits $z = -d$ and
targets as `[N, K]` rows, the gradient of `d` and the row factor
$c_i = \partial L/\partial\ell_i$; since $\partial\ell_i/\partial d_{ij} = t_{ij} - r_{ij}$,
$r = t - \nabla_d / c$.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from implicit_em.hook_points import hook_point
from implicit_em.trace.metrics import Stats
from implicit_em.trace.sites.base import Context, Kept
from implicit_em.trace.sites.cross_entropy import CrossEntropy
from implicit_em.trace.sites.responsibility import (
    distance_statistics,
    keep_distance_gradients,
    row_stride,
    rows,
    sample_rows,
)

__all__ = ["DistanceCrossEntropy", "DistanceCrossEntropyKept"]


@dataclass(eq=False)
class DistanceCrossEntropyKept(Kept):
    """`logits` and `target` `[N, K]`; `grad` `[N, K]` (of `d`) and `factor`
    `[N]` once the backward pass reached them."""

    logits: Tensor
    target: Tensor
    grad: Tensor | None = None
    factor: Tensor | None = None
    nonfinite: Tensor | None = None


class DistanceCrossEntropy(CrossEntropy):
    searched = "implicit_em.objectives.cross_entropy"
    functions = (hook_point,)

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        if args[0] != "cross_entropy":
            return
        loss, d, dim = args[1], kwargs["d"], kwargs["dim"]
        name = ctx.name("ce", d)
        if name is None:
            return
        with torch.no_grad():
            logits = rows(-d, dim)
            empty = (logits == float("-inf")).all(-1, keepdim=True)
            logits = torch.where(empty, torch.zeros_like(logits), logits)
        stride = row_stride(logits.shape[0], ctx.max_responsibility_rows)
        target = sample_rows(rows(kwargs["target"], dim), stride)
        kept = DistanceCrossEntropyKept(ctx.keep(sample_rows(logits, stride)), ctx.keep(target))
        ctx.add(name, self, kept)
        keep_distance_gradients(ctx, kept, d, loss, dim, stride)

    def statistics(self, k: Kept) -> Stats:
        return distance_statistics(k, k.target, -1.0)

r"""This package's `mixture_nll`: a mixture site.

Announced through its hook point (`hook_point`) with the
per-sample loss $\ell_i = -\log\sum_j \pi_j e^{-d_{ij} + \log|\det W_j|}$, the distances
`d`, `log_prior`, `log_det` and `dim`. Kept: the logits
$z = \log\pi - d + \log|\det W|$ as `[N, K]` rows, the gradient of `d` and the row
factor $c_i = \partial L/\partial\ell_i$; since $\partial\ell_i/\partial d_{ij} = r_{ij}$,
$r = \nabla_d / c$.
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
from implicit_em.trace.sites.responsibility import (
    RESPONSIBILITY_METRICS,
    ResponsibilityKind,
    distance_statistics,
    keep_distance_gradients,
    row_stride,
    rows,
    sample_rows,
)

__all__ = ["MixtureKept", "MixtureNLL"]


@dataclass(eq=False)
class MixtureKept(Kept):
    """`logits` `[N, K]`; `grad` `[N, K]` (of `d`) and `factor` `[N]` once the
    backward pass reached them."""

    logits: Tensor
    grad: Tensor | None = None
    factor: Tensor | None = None
    nonfinite: Tensor | None = None


class MixtureNLL(ResponsibilityKind):
    type = "mixture"
    searched = "implicit_em.objectives.mixture_nll"
    functions = (hook_point,)
    metrics = (
        *RESPONSIBILITY_METRICS,
        "log_z",
        "log_z_max",
        "rows",
        "residual",
        "nonfinite",
    )

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        if args[0] != "mixture_nll":
            return
        loss, d, dim = args[1], kwargs["d"], kwargs["dim"]
        name = ctx.name("mixture", d)
        if name is None:
            return
        with torch.no_grad():
            logits = -d if kwargs["log_det"] is None else kwargs["log_det"] - d
            if kwargs["log_prior"] is not None:
                logits = logits + kwargs["log_prior"]
            logits = torch.broadcast_to(logits, d.shape)
        logits = rows(logits, dim)
        stride = row_stride(logits.shape[0], ctx.max_responsibility_rows)
        kept = MixtureKept(ctx.keep(sample_rows(logits, stride)))
        ctx.add(name, self, kept)
        keep_distance_gradients(ctx, kept, d, loss, dim, stride)

    def statistics(self, k: Kept) -> Stats:
        return distance_statistics(k, None, 1.0)

r"""A mixture-of-experts router: a softmax over the experts of `[T, E]` token rows whose
probabilities dispatch each token to experts (a `topk` over the experts, or the top-1 `max`
of Switch, which yields the gate values and the experts at once).

A router is what it claims to be only with both parts: the dispatch, and a gradient through
the softmax, with the dispatched probabilities gating the experts (the backward pass reaches
them). No router, then: a softmax without a dispatch (predictions, an `argmax` for accuracy,
a calibration, an attention written by hand over 2-D rows); a balancing loss's own recount of
the routing (its `topk` values are discarded); a softmax of constants or under `no_grad`
(predictions, accuracy, a teacher's soft targets), except in the tracer's own probe pass,
which runs the model's routers under `no_grad` by design.

The router's probabilities $p_t = \operatorname{softmax}(z_t)$ over $E$ experts are the
responsibilities of its tokens. Kept: the logits of the sampled rows, the number of
assignments per expert over *all* rows (the dispatch's indices: $k$ per token for a `topk`,
one for a `max`), counted on the device without a synchronization, and, once the backward
pass reached them, the gradients of the logits (a private alias of the softmax's input, so
the router's gradient alone, even when the logits also feed a router z-loss) and of the
probabilities. Identity residual: the softmax
Jacobian, $\nabla_z = p\odot(\nabla_p - \langle p, \nabla_p\rangle)$, as
$\max|\nabla_z - p\odot(\nabla_p - \langle p,\nabla_p\rangle)| / \max|\nabla_z|$.

Metrics, with $f_i$ the share of the assignments routed to expert $i$ (summing to 1 over the
experts, also for top-$k$) and $P_i$ the mean router probability of expert $i$:
`expert_load` $f$, `expert_prob` $P$, `aux_balance` $E\sum_i f_i P_i$ (1 when balanced, the
Switch Transformer's auxiliary loss without its coefficient), `load_cv`
$\operatorname{std}(f)/\operatorname{mean}(f)$, `max_load_ratio`
$\max_i f_i / \operatorname{mean}(f)$, `dead_experts` (no assignment in the step), `router_entropy_ratio` $\exp(\bar H)/E$ with
$\bar H$ the mean per-token entropy (1 uniform, $1/E$ one-hot), `router_z` the mean of
$\operatorname{LSE}(z_t)^2$ (ST-MoE's router z-loss without its coefficient), `log_z` and
`log_z_max` (mean and max of $\operatorname{LSE}(z_t)$), and the responsibility metrics of $p$.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.trace.metrics import (
    Stats,
    finish_responsibility,
    log_z_stats,
    residual_tolerance,
    responsibility_stats_steps,
)
from implicit_em.trace.sites.base import Context, Kept
from implicit_em.trace.sites.responsibility import (
    RESPONSIBILITY_METRICS,
    ResponsibilityKind,
    row_stride,
    sample_rows,
    to_float,
)

__all__ = ["Router", "RouterKept"]

_SOFTMAX = (F.softmax, torch.softmax, Tensor.softmax)
_TOPK = (torch.topk, Tensor.topk)
_MAX = (torch.max, Tensor.max)


@dataclass(eq=False)
class RouterKept(Kept):
    """`logits` `[N, E]` of the sampled rows, `counts` `[E]` (assignments per expert over all
    rows), `top_k` (assignments per token); `grad` and `grad_probs` `[N, E]` (of the logits
    and of the probabilities) once the backward pass reached them, and `gated`, whether the
    dispatched probabilities (the gates) carried a gradient (True in the probe pass)."""

    logits: Tensor
    counts: Tensor
    top_k: int
    grad: Tensor | None = None
    grad_probs: Tensor | None = None
    gated: bool = False


def _counts(index: Tensor, experts: int) -> Tensor:
    """Assignments per expert of the expert indices `index` (any shape), `[experts]` in float64,
    by a scatter-add (no host synchronization, unlike `bincount`)."""
    flat = index.reshape(-1)
    ones = torch.ones(flat.shape, dtype=torch.float64, device=flat.device)
    return torch.zeros(experts, dtype=torch.float64, device=flat.device).scatter_add_(0, flat, ones)


def _dispatched(
    func: Callable, experts: int, args: Sequence, kwargs: dict, out: Any
) -> Tensor | None:
    """The expert indices `[T, k]` of a dispatch over the last axis of router probabilities
    with `experts` columns (`topk` with $k < E$ of the largest, or `max`, along that axis),
    or None when the call is no dispatch (a `max` of the whole tensor, a `topk` of all
    experts or of the smallest, another axis)."""
    if func in _TOPK:
        k = kwargs.get("k", args[1] if len(args) > 1 else None)
        dim = kwargs.get("dim", args[2] if len(args) > 2 else -1)
        largest = kwargs.get("largest", args[3] if len(args) > 3 else True)
        if not (isinstance(k, int) and 0 < k < experts and largest):
            return None
    else:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if not isinstance(dim, int) or isinstance(dim, bool) or dim not in (-1, 1):
        return None
    index = out[1]
    return index if index.dim() == 2 else index.unsqueeze(-1)


class Router(ResponsibilityKind):
    type = "router"
    searched = (
        "softmax over the last axis of a 2-D tensor with a gradient, then topk or max over it "
        "(MoE router)"
    )
    functions = _SOFTMAX + _TOPK + _MAX
    aliased: ClassVar[dict[Callable, tuple[int, str]]] = dict.fromkeys(_SOFTMAX, (0, "input"))
    metrics = (
        "expert_load",
        "expert_prob",
        "aux_balance",
        "load_cv",
        "max_load_ratio",
        "dead_experts",
        "router_entropy_ratio",
        "router_z",
        "log_z",
        "log_z_max",
        *RESPONSIBILITY_METRICS,
        "rows",
        "residual",
        "nonfinite",
    )
    gradient_metrics = ("residual",)

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        x = args[0] if args else kwargs.get("input")
        if func in _SOFTMAX:
            self._softmax(ctx, x, kwargs.get("dim", args[1] if len(args) > 1 else None), out)
        else:
            self._dispatch(ctx, func, x, args, kwargs, out)

    def _softmax(self, ctx: Context, x: Any, dim: Any, out: Any) -> None:
        """A candidate router: a softmax over the last axis of 2-D rows with a gradient
        through it (or in the probe pass), kept until a dispatch of its output."""
        if not isinstance(x, Tensor) or x.dim() != 2 or dim not in (-1, 1) or x.shape[-1] < 2:
            return
        if not ctx.probing and not (torch.is_grad_enabled() and x.requires_grad):
            return  # predictions under no_grad, soft targets, a teacher: no gradient, no router
        ctx.scratch(self)[id(out)] = (weakref.ref(out), x)

    def _dispatch(
        self, ctx: Context, func: Callable, probs: Any, args: Sequence, kwargs: dict, out: Any
    ) -> None:
        """A `topk` or `max` over the experts of a candidate router's probabilities:
        the router site, with the dispatch's expert indices."""
        entry = ctx.scratch(self).get(id(probs))
        if entry is None or entry[0]() is not probs:
            return
        index = _dispatched(func, probs.shape[-1], args, kwargs, out)
        if index is None:
            return
        del ctx.scratch(self)[id(probs)]  # one site per softmax
        x = entry[1]
        name = ctx.name("router", x)
        if name is None:
            return
        stride = row_stride(x.shape[0], ctx.max_responsibility_rows)
        with torch.no_grad():
            counts = _counts(index, x.shape[-1])
        kept = RouterKept(
            logits=ctx.keep(sample_rows(x, stride)),
            counts=counts,
            top_k=index.shape[-1],
            gated=ctx.probing,
        )
        ctx.add(name, self, kept)

        def grad(g: Tensor) -> None:
            kept.grad = ctx.keep(sample_rows(g, stride))

        def grad_probs(g: Tensor) -> None:
            kept.grad_probs = ctx.keep(sample_rows(g, stride))

        def gates(g: Tensor) -> None:
            kept.gated = True

        ctx.on_gradient(x, grad)
        ctx.on_gradient(probs, grad_probs)
        ctx.on_gradient(out[0], gates)

    def confirmed(self, kept: Kept) -> bool:
        """A router's dispatched probabilities gate the experts' outputs, so the backward pass
        reaches them; a loss that recounts the routing (a balancing loss's own `topk` over
        the gate logits of every layer) discards them."""
        return kept.gated

    def statistics(self, k: Kept) -> Stats:
        steps = k.logits.shape[0]
        logits = to_float(k.logits)
        probs = torch.softmax(logits, -1)
        lse = torch.logsumexp(logits, -1)
        valid = torch.ones(lse.shape, dtype=torch.bool, device=lse.device)
        stats = responsibility_stats_steps(probs.clone(), valid, None, logits)
        stats |= log_z_stats(lse, valid)
        zero = torch.zeros(steps, dtype=torch.float64, device=lse.device)
        stats.update(
            counts=k.counts.double(),
            router_z=lse.square().sum(-1).double(),
            top_k_max=torch.full((steps,), float(k.top_k), dtype=torch.float64),
            tolerance_max=residual_tolerance(k.logits.dtype, steps, lse.device),
            residual_max=zero,
            grad_max=zero,
            nonfinite=zero,
            n_grad=zero,
        )
        if k.grad is None or k.grad_probs is None:
            return stats
        g, gp = to_float(k.grad), to_float(k.grad_probs)
        finite = torch.isfinite(g.sum(-1)) & torch.isfinite(gp.sum(-1))
        expected = probs * (gp - (probs * gp).sum(-1, keepdim=True))
        err = (g - expected).abs().amax(-1)
        stats["residual_max"] = torch.where(finite, err, 0.0).amax(-1).double()
        stats["grad_max"] = torch.where(finite, g.abs().amax(-1), 0.0).amax(-1).double()
        stats["nonfinite"] = (~finite).sum(-1).double()
        stats["n_grad"] = finite.sum(-1).double()
        return stats

    def finish(self, stats: Stats, dead_fraction: float) -> dict[str, Tensor]:
        out = finish_responsibility(stats, dead_fraction)
        n = stats["n"].clamp_min(1)
        counts = stats["counts"]
        experts = counts.shape[-1]
        load = counts / counts.sum(-1, keepdim=True).clamp_min(1)
        mean = load.mean(-1).clamp_min(1e-300)
        out.update(
            expert_load=load,
            expert_prob=out["mass"],
            aux_balance=experts * (load * out["mass"]).sum(-1),
            load_cv=load.std(-1, correction=0) / mean,
            max_load_ratio=load.amax(-1) / mean,
            dead_experts=(counts == 0).sum(-1).to(load.dtype),
            router_entropy_ratio=out["entropy"].exp() / experts,
            router_z=stats["router_z"] / n,
            residual=stats["residual_max"] / stats["grad_max"].clamp_min(1e-300),
            top_k=stats["top_k_max"],
        )
        return out

    def extras(self, values: dict[str, Any], max_components: int) -> dict[str, Any]:
        return {"K": len(values["mass"]), "top_k": int(values["top_k"])}

r"""A mixture-of-experts router: a softmax over the experts of `[T, E]` token rows, with or
without a following `topk` (under gradients, only of logits that require one: a softmax of
constants, such as soft targets, is no router).

The router's probabilities $p_t = \operatorname{softmax}(z_t)$ over $E$ experts are the
responsibilities of its tokens. Kept: the logits of the sampled rows, the number of
assignments per expert over *all* rows (each token's `topk` indices when a `topk` along the
experts follows the softmax, else its $\arg\max$: top-1 as in Switch), counted on the device
without a synchronization, and, once the backward pass reached them, the gradients of the
logits (a private alias of the softmax's input, so the router's gradient alone, even when the
logits also feed a router z-loss) and of the probabilities. Identity residual: the softmax
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


@dataclass(eq=False)
class RouterKept(Kept):
    """`logits` `[N, E]` of the sampled rows, `counts` `[E]` (assignments per expert over all
    rows), `top_k` (assignments per token); `grad` and `grad_probs` `[N, E]` (of the logits
    and of the probabilities) once the backward pass reached them."""

    logits: Tensor
    counts: Tensor
    top_k: int
    grad: Tensor | None = None
    grad_probs: Tensor | None = None


def _counts(index: Tensor, experts: int) -> Tensor:
    """Assignments per expert of the expert indices `index` (any shape), `[experts]` in float64,
    by a scatter-add (no host synchronization, unlike `bincount`)."""
    flat = index.reshape(-1)
    ones = torch.ones(flat.shape, dtype=torch.float64, device=flat.device)
    return torch.zeros(experts, dtype=torch.float64, device=flat.device).scatter_add_(0, flat, ones)


class Router(ResponsibilityKind):
    type = "router"
    searched = "softmax over the last axis of a 2-D tensor, optionally then topk (MoE router)"
    functions = _SOFTMAX + _TOPK
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
        followed = ctx.scratch(self)
        x = args[0] if args else kwargs.get("input")
        if func in _TOPK:
            entry = followed.get(id(x))
            dim = kwargs.get("dim", args[2] if len(args) > 2 else -1)
            largest = kwargs.get("largest", args[3] if len(args) > 3 else True)
            if entry is not None and entry[0]() is x and dim in (-1, 1) and largest:
                kept = entry[1]
                kept.counts = _counts(out[1], x.shape[-1])
                kept.top_k = out[1].shape[-1]
            return
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if not isinstance(x, Tensor) or x.dim() != 2 or dim not in (-1, 1):
            return
        if torch.is_grad_enabled() and not x.requires_grad:
            return  # a constant of a training pass (soft targets, a teacher): no router
        name = ctx.name("router", x)
        if name is None:
            return
        stride = row_stride(x.shape[0], ctx.max_responsibility_rows)
        with torch.no_grad():
            counts = _counts(out.argmax(-1), x.shape[-1])
        kept = RouterKept(logits=ctx.keep(sample_rows(x, stride)), counts=counts, top_k=1)
        ctx.add(name, self, kept)
        followed[id(out)] = (weakref.ref(out), kept)

        def grad(g: Tensor) -> None:
            kept.grad = ctx.keep(sample_rows(g, stride))

        def grad_probs(g: Tensor) -> None:
            kept.grad_probs = ctx.keep(sample_rows(g, stride))

        ctx.on_gradient(x, grad)
        ctx.on_gradient(out, grad_probs)

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

r"""Statistics of many captured site calls at once: capture per step, compute in batches.

The tracer keeps, per measured step and site, only the small detached tensors the statistics
need (:meth:`~implicit_em.trace.sites.ResponsibilityCall.prepare`,
:meth:`~implicit_em.trace.sites.AttentionCall.prepare`). At a flush, calls whose inputs have
equal names, shapes and dtypes (the same site over several steps, and sites of equal shape such
as all the attention layers of a model) are stacked along a new leading axis ``S`` and reduced
by one batched pass; every statistic then carries that leading axis. Tiny tensor operations
cost microseconds each on a CPU, so the cost of tracing is their count: a batched pass costs
about what one call's pass costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.attention import attention_scores
from implicit_em.trace.metrics import (
    Stats,
    attention_stats_steps,
    per_step,
    read_responsibilities,
    responsibility_stats_steps,
)
from implicit_em.trace.sites import (
    AttentionCall,
    Inputs,
    ResponsibilityCall,
    attention_weights,
    lengths_first,
    projected_heads,
)

__all__ = ["Group", "group_stats"]


@dataclass
class Group:
    """Calls reduced together: ``index[s]`` is the position (in the flushed list of calls) of
    the call whose statistics are ``stats[key][s]``."""

    kind: str
    index: list[int]
    stats: Stats


_SLICE_WEIGHTS = 2**17
"""Attention weights per batched pass: the pass's few same-sized intermediates then stay in a
CPU's L2 cache (about 2x faster per call than one pass over a whole flush; see
``benchmarks/trace_overhead.py``), and a flush's peak memory stays bounded."""


def group_stats(calls: Sequence[ResponsibilityCall | AttentionCall]) -> list[Group]:
    """The statistics of every call, computed with one batched pass per group of stackable
    calls (in the order in which each group first appears); attention groups are reduced in
    slices of about ``_SLICE_WEIGHTS`` attention weights. Within a group the calls are ordered
    by site (in step order for each), so that a site's consecutive measurements, kept in
    consecutive rows of its slot buffers, stack without a copy (:func:`_stack_rows`)."""
    groups: dict[tuple, tuple[list[int], list[Inputs]]] = {}
    for i, call in enumerate(calls):
        key, inputs = call.prepare()
        index, stacked = groups.setdefault(key, ([], []))
        index.append(i)
        stacked.append(inputs)
    for key, (index, inputs) in groups.items():
        order = sorted(range(len(index)), key=lambda j: calls[index[j]].name)
        groups[key] = ([index[j] for j in order], [inputs[j] for j in order])
    out = []
    with torch.no_grad():
        for key, (index, inputs) in groups.items():
            if key[0] == "responsibility":
                stats = responsibility_steps(_stack(inputs), key[1], key[2])
                out.append(Group("responsibility", index, stats))
                continue
            size = max(1, _SLICE_WEIGHTS // _weights_per_call(inputs[0], key[4], key[5]))
            parts = [
                attention_steps(_stack(inputs[i : i + size]), *key[1:6])
                for i in range(0, len(inputs), size)
            ]
            stats = (
                parts[0]
                if len(parts) == 1
                else {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
            )
            out.append(Group("attention", index, stats))
    return out


def _stack(inputs: Sequence[Inputs]) -> Inputs:
    """Stack equally named and shaped inputs along a new leading (step) axis."""
    return {name: _stack_rows([d[name] for d in inputs]) for name in inputs[0]}


def _stack_rows(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.stack(tensors)``; a view, without a copy, when the tensors are consecutive rows
    ``buffer[i], buffer[i + 1], ...`` of one buffer (a site's slot buffer,
    :mod:`~implicit_em.trace.slots`, over consecutive measured steps)."""
    first = tensors[0]
    base = first._base
    if base is None or len(tensors) == 1 or first.shape != base.shape[1:]:
        return torch.stack(tensors)
    step = base.stride(0)
    start = first.storage_offset()
    if first.stride() != base.stride()[1:] or (start - base.storage_offset()) % step:
        return torch.stack(tensors)
    # Rows of one buffer, distinct and in step order (each measurement has its own slot, and
    # a site's calls come in step order): consecutive when the last is len - 1 rows on.
    last = tensors[-1].storage_offset() - start
    if last != (len(tensors) - 1) * step or any(t._base is not base for t in tensors):
        return torch.stack(tensors)
    row = (start - base.storage_offset()) // step
    return base[row : row + len(tensors)]


def _weights_per_call(x: Inputs, heads: int, rows_first: bool) -> int:
    """The number of attention weights one call's inputs give."""
    if "alpha" in x:
        return x["alpha"].numel()
    if "x" in x or "query" in x:
        q = x["x"] if "x" in x else x["query"]
        keys = (x["x"] if "x" in x else x["key"]).shape[1 if rows_first else 0]
        return q.shape[:-1].numel() * keys * heads
    return x["q"].shape[:-1].numel() * x["k"].shape[-2]


def responsibility_steps(x: Inputs, sign: float, form: tuple | None = None) -> Stats:
    r"""Statistics of ``S`` stacked classification / mixture calls.

    Targets, row weights and factors are formed here for the whole stack when ``form`` says
    how (:func:`cross_entropy_terms`); otherwise ``x`` holds them (``weight``, ``target``,
    ``factor``). With a gradient: rows are valid where :math:`c_i` is finite and non-zero, the
    gradient row is finite and the row weight is positive; :math:`r = t + \text{sign}\cdot\nabla/c`
    (:func:`~implicit_em.trace.metrics.read_responsibilities`), the identity residual is
    :math:`\max_i\max_j|r_{ij} - \operatorname{softmax}(z_i)_j|` over valid rows. Without one
    (no backward): the forward softmax over the rows of positive weight, residual 0.
    """
    logits = x["logits"]
    if form is not None:
        target, weight, c = cross_entropy_terms(x, form)
    else:
        target, weight, c = x.get("target"), x["weight"], x.get("factor")
    if "grad" not in x:
        r = _softmax(logits)
        stats = responsibility_stats_steps(r, weight > 0, target, logits)
        zero = torch.zeros(logits.shape[0], dtype=r.dtype, device=r.device)
        stats.update(residual_max=zero, nonfinite=zero, n_grad=zero)
        return stats
    g = x["grad"]
    finite = torch.isfinite(g).all(-1)
    valid = (c != 0) & torch.isfinite(c) & finite & (weight > 0)
    r_grad = read_responsibilities(
        torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0),
        torch.where(valid, c, torch.zeros_like(c)),
        target,
        sign,
    )
    err = (r_grad - _softmax(logits)).abs().amax(-1)
    stats = responsibility_stats_steps(r_grad, valid, target, logits)
    stats["residual_max"] = torch.where(valid, err, torch.zeros_like(err)).amax(-1)
    stats["nonfinite"] = (~finite & (c != 0)).sum(-1).to(g.dtype)
    stats["n_grad"] = valid.sum(-1).to(g.dtype)
    return stats


def _softmax(z: Tensor) -> Tensor:
    r""":math:`\operatorname{softmax}(z)` along the last axis; for fewer than 64 components as
    :math:`e^{z - \max z} / \sum e^{z - \max z}` in three passes, which on a CPU is several times
    faster than ``torch.softmax`` (whose vectorized kernel handles short rows one at a time)."""
    if z.shape[-1] >= 64:
        return torch.softmax(z, dim=-1)
    e = (z - z.amax(-1, keepdim=True)).exp_()
    return e.div_(e.sum(-1, keepdim=True))


def cross_entropy_terms(x: Inputs, form: tuple) -> tuple[Tensor, Tensor, Tensor | None]:
    r"""Targets :math:`t` ``[S, N, K]``, row weights :math:`w` ``[S, N]`` and row factors
    :math:`c` ``[S, N]`` (None without a gradient) of ``S`` stacked cross-entropies, as
    ``F.cross_entropy`` forms its loss :math:`\sum_i c_i \ell_i`.

    ``form`` is ``("labels", ignore_index, smoothing, reduction)`` for class indices
    ``labels`` (:math:`w_i` = ``class_weight`` of the label, 0 where ignored) or
    ``("soft", _, smoothing, reduction)`` for probabilities ``target`` (:math:`w_i = 1`);
    smoothing gives :math:`(1-\varepsilon)t + \varepsilon/K`; with the upstream gradient
    :math:`u` of the loss, :math:`c_i = u\,w_i/\sum_i w_i` for a mean, :math:`u\,w_i` (or
    :math:`u_i w_i`) otherwise, and zeros without it.
    """
    kind, ignore_index, smoothing, reduction = form
    logits = x["logits"]
    s, n, k = logits.shape
    if kind == "labels":
        labels = x["labels"]
        kept = labels != ignore_index
        index = torch.where(kept, labels, 0)
        if "class_weight" in x:
            weight = x["class_weight"].to(logits.dtype).gather(-1, index) * kept
        else:
            weight = kept.to(logits.dtype)
        target = F.one_hot(index, k).to(logits.dtype)
    else:
        target = x["target"]
        weight = torch.ones(s, n, dtype=logits.dtype, device=logits.device)
    if smoothing:
        target = (1.0 - smoothing) * target + smoothing / k
    if "grad" not in x:
        return target, weight, None
    if "upstream" not in x:
        return target, weight, torch.zeros_like(weight)
    c = x["upstream"].reshape(s, -1).to(logits.dtype) * weight
    if reduction == "mean":
        c = c / weight.sum(-1, keepdim=True)
    return target, weight, c


def attention_steps(
    x: Inputs,
    is_causal: bool,
    scale: float | None,
    reconstruct: str | None,
    heads: int = 0,
    rows_first: bool = False,
) -> Stats:
    r"""Statistics of ``S`` stacked attention calls (in float32): the weights (recomputed from
    ``q``, ``k`` when not captured, as :math:`\exp` of the log-softmax of the scores when no
    mask excludes any entry, after splitting ``heads`` heads from the kept
    ``nn.MultiheadAttention`` projections, :func:`~implicit_em.trace.sites.projected_heads`),
    :func:`~implicit_em.trace.metrics.attention_stats_steps`, and for recomputed weights the
    forward residual of the output rebuilt from :math:`\alpha` and :math:`v` along a random
    direction, with the output's size along it (:func:`_forward_residual`). ``rows_first``: the
    kept ``nn.MultiheadAttention`` rows are ``[S, R, L, E]``
    (:func:`~implicit_em.trace.sites.lengths_first`)."""
    if rows_first:
        x = lengths_first(x)
    if "in_weight" in x or "q_weight" in x:
        q, k, v, mask = projected_heads(x, heads)
        x = {**x, "q": q, "k": k, "v": v}
        if mask is not None:
            x["mask"] = mask
    log_alpha = None
    if "alpha" in x:
        alpha = x["alpha"].float()
    elif "mask" in x or is_causal:
        alpha = attention_weights(x["q"], x["k"], x.get("mask"), is_causal, scale).float()
    else:
        log_alpha = torch.log_softmax(attention_scores(x["q"], x["k"], None, False, scale), -1)
        log_alpha = log_alpha.float()
        alpha = log_alpha.exp()
    v = x.get("v")
    v = None if v is None else v.float().expand(*alpha.shape[:-2], -1, -1)
    if "g_output" in x:
        x = {**x, "g": _output_gradient_heads(x["g_output"], x["out_weight"], alpha.shape[2])}
    g = None if v is None or "g" not in x else x["g"].float()
    grad_v = x.get("grad_v")
    grad_v = None if grad_v is None or v is None or grad_v.shape != v.shape else grad_v.float()
    used = x.get("used")
    grad_alpha = x.get("grad_alpha")
    stats = attention_stats_steps(
        alpha,
        v,
        g,
        None if grad_alpha is None else grad_alpha.float(),
        None if used is None else used.float(),
        grad_v,
        log_alpha,
    )
    if reconstruct is not None and v is not None:
        stats["alpha_residual_max"], stats["output_max"] = _forward_residual(
            alpha, v, reconstruct, x
        )
    return stats


def _output_gradient_heads(g_output: Tensor, out_weight: Tensor, heads: int) -> Tensor:
    r"""The per-head output gradient :math:`g = (\partial L/\partial y) W_o` of
    ``nn.MultiheadAttention`` from the gradient of its output ``g_output[S, Lq, R, E]`` and the
    out-projection ``out_weight[S, E, E]``: ``[S, R, H, Lq, E/H]``."""
    g = g_output.float().transpose(1, 2) @ out_weight.float().unsqueeze(1)
    s, r, lq, e = g.shape
    return g.reshape(s, r, lq, heads, e // heads).transpose(2, 3)


def _forward_residual(
    alpha: Tensor, v: Tensor, reconstruct: str, x: Inputs
) -> tuple[Tensor, Tensor]:
    r"""How well the weights ``alpha`` and values ``v`` (``[S, N, H, Lk, Ev]``) rebuild the
    captured output :math:`y`, seen along a fixed random unit direction :math:`u`
    (:func:`_direction`): per step :math:`\max_i |u \cdot (\hat y_i - y_i)|` and
    :math:`\max_i |u \cdot y_i|`.

    :math:`\hat y` is the per-head output :math:`\alpha v` (``"matmul"``; :math:`y` is
    ``[S, N, H, Lq, Ev]``) or the heads merged and projected, :math:`\hat y = o W_o^\top + b_o`
    (``"projection"``, ``nn.MultiheadAttention``; :math:`y` is ``[S, Lq, N, E]``). Along
    :math:`u` neither product is formed: :math:`u \cdot \hat y_i = \sum_h \alpha_{h,i}
    (v_h w_h) + u \cdot b_o` with :math:`w = W_o^\top u` split into heads (Freivalds' check:
    a rebuild that differs from :math:`y` differs along a random :math:`u` with probability 1)."""
    out = x["output"].float()
    u = _direction(out.shape[-1], out.device)
    # Products with a vector as elementwise products and sums: batched matrix-vector
    # products of small matrices run several times slower on a CPU.
    if reconstruct == "matmul":
        rebuilt = (alpha * (v * u).sum(-1).unsqueeze(-2)).sum(-1)
        seen = (out * u).sum(-1)
    else:
        s, _, heads, _, ev = v.shape
        w = (x["out_weight"].float() * u.unsqueeze(-1)).sum(-2).reshape(s, 1, heads, 1, ev)
        rebuilt = (alpha * (v * w).sum(-1).unsqueeze(-2)).sum(-1).sum(2)
        if "out_bias" in x:
            rebuilt = rebuilt + (x["out_bias"].float() * u).sum(-1).reshape(s, 1, 1)
        seen = (out * u).sum(-1).transpose(1, 2)
    return per_step((rebuilt - seen).abs(), "amax").double(), per_step(seen.abs(), "amax").double()


_DIRECTIONS: dict[tuple[int, torch.device], Tensor] = {}


def _direction(n: int, device: torch.device) -> Tensor:
    """A fixed random unit vector of length ``n`` (float32, seeded: the same in every run)."""
    u = _DIRECTIONS.get((n, device))
    if u is None:
        u = torch.randn(n, generator=torch.Generator().manual_seed(n))
        u = (u / u.norm()).to(device)
        _DIRECTIONS[(n, device)] = u
    return u

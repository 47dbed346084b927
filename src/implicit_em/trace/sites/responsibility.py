r"""What the responsibility kinds (cross-entropy, mixture NLL) share: statistics and metrics.

A site has logits $z$ (`[N, K]` rows), optional targets $t$, row weights
$w_i$ and, once the backward pass reached it, the gradient $\nabla$ of the loss with
respect to its logits or distances and the row factor $c_i$ (the upstream gradient of row
$i$'s loss). The responsibilities read from the gradient are
$r = t + \text{sign}\cdot\nabla / c$ (`read_responsibilities`);
the identity residual compares them with the forward softmax of $z$.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from implicit_em.trace.metrics import (
    Stats,
    Targets,
    churn_stats,
    finish_responsibility,
    log_partition,
    log_z_stats,
    read_responsibilities,
    residual_tolerance,
    responsibility_stats_steps,
)
from implicit_em.trace.sites.base import Context, Kept, SiteKind

__all__ = [
    "RESPONSIBILITY_METRICS",
    "ResponsibilityKind",
    "distance_statistics",
    "keep_distance_gradients",
    "keep_gradient_rows",
    "nonfinite_rows",
    "responsibility_statistics",
    "row_stride",
    "rows",
    "sample_rows",
    "to_float",
]


def rows(t: Tensor, dim: int) -> Tensor:
    """Move the component axis `dim` last and flatten the rest: `[N, K]`."""
    if t.dim() == 2 and dim in (1, -1):
        return t
    return t.movedim(dim, -1).reshape(-1, t.shape[dim])


def sample_rows(t: Tensor, stride: int) -> Tensor:
    """Every `stride`-th row of `t` (`t` itself for 1)."""
    return t if stride == 1 else t[::stride]


def to_float(t: Tensor) -> Tensor:
    """Half precision in float32 (statistics need the range); other dtypes unchanged."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def responsibility_statistics(
    logits: Tensor,
    target: Targets | None,
    weight: Tensor,
    c: Tensor | None,
    grad: Tensor | None,
    sign: float,
    nonfinite: Tensor | None,
) -> Stats:
    r"""Statistics of `S` stacked sites: `logits` and `grad` `[S, N, K]`, `target`
    over the same rows, `weight` and `c` `[S, N]` (`c`, `grad` None without a gradient),
    and `nonfinite` `[S]`, the non-finite gradient rows each site counted over all its rows
    at capture (None without a gradient, or when every row was kept: then counted here).

    With a gradient, rows are valid where $c_i$ is finite and non-zero, the gradient row
    finite and $w_i > 0$; the residual is
    $\max_i\max_j|r_{ij} - \operatorname{softmax}(z_i)_j|$ over valid rows, with its
    tolerance (`residual_tolerance` of the logits' dtype), and $\log Z_i$ of the rows of
    positive weight (`log_z_stats`). Without one, the forward softmax
    over the rows of positive weight, residual 0.
    """
    tolerance = residual_tolerance(logits.dtype, logits.shape[0], logits.device)
    logits = to_float(logits)
    right = None if target is None else target.right()
    forward = torch.softmax(logits, dim=-1)
    label_logit = None if right is None else logits.gather(-1, right.unsqueeze(-1)).squeeze(-1)
    log_z = log_z_stats(log_partition(logits, forward), weight > 0, label_logit)
    if grad is None or c is None:
        stats = responsibility_stats_steps(forward, weight > 0, right, logits) | log_z
        zero = torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device)
        stats.update(residual_max=zero, tolerance_max=tolerance, nonfinite=zero, n_grad=zero)
        return stats
    grad = to_float(grad)
    finite = torch.isfinite(grad.sum(-1))  # a row sum is finite iff the row is (|sum| <= 2|c|)
    valid = (c != 0) & torch.isfinite(c) & finite & (weight > 0)
    r = read_responsibilities(grad, torch.where(valid, c, 0.0), target, sign)
    err = forward.sub_(r).abs_().amax(-1)
    stats = responsibility_stats_steps(r, valid, right, logits) | log_z
    stats["residual_max"] = torch.where(valid, err, 0.0).amax(-1)
    stats["tolerance_max"] = tolerance
    if nonfinite is None:  # every row was kept
        nonfinite = (~finite).sum(-1)
    stats["nonfinite"] = nonfinite.to(grad.dtype)
    stats["n_grad"] = valid.sum(-1).to(grad.dtype)
    return stats


def row_stride(n: int, max_rows: int | None) -> int:
    """The stride of the evenly spread sample of at most `max_rows` of `n` rows (1: all)."""
    return 1 if max_rows is None or n <= max_rows else -(-n // max_rows)


def nonfinite_rows(g: Tensor) -> Tensor:
    """The number of rows of `g` (`[N, K]`) holding a NaN or an infinity, as a 0-d tensor
    (no host synchronization: it is read at the flush)."""
    return (~torch.isfinite(g.sum(-1))).sum()


def keep_gradient_rows(ctx: Context, kept: Kept, g: Tensor, stride: int) -> None:
    """Keep a site's gradient rows `g` (`[N, K]`) in `kept.grad`, every `stride`-th row as
    its other rows, and for `stride` > 1 the number of non-finite rows among all of them in
    `kept.nonfinite` (with every row kept, the flush counts them from the kept rows)."""
    if stride > 1:
        kept.nonfinite = nonfinite_rows(g)
    kept.grad = ctx.keep(sample_rows(g, stride))


def keep_distance_gradients(
    ctx: Context, kept: Kept, d: Tensor, loss: Tensor, dim: int, stride: int
) -> None:
    """Keep what a site of the package's distance objectives reads in the backward pass: the
    gradient of `d` as `[N, K]` rows in `kept.grad` (every `stride`-th row, as the site's
    other rows), the number of non-finite gradient rows among all rows in `kept.nonfinite`
    (for `stride` > 1; else counted at the flush),
    and the upstream gradient of the per-sample `loss` (the row factor $c_i$) in
    `kept.factor`."""

    def grad(g: Tensor) -> None:
        keep_gradient_rows(ctx, kept, rows(g, dim), stride)

    def factor(u: Tensor) -> None:
        kept.factor = ctx.keep(sample_rows(u.reshape(-1), stride))

    ctx.on_gradient(d, grad)
    ctx.on_gradient(loss, factor)


def distance_statistics(k: Kept, target: Tensor | None, sign: float) -> Stats:
    """`responsibility_statistics` of stacked distance-objective records (`k.logits`,
    `k.grad`, `k.factor`, `k.nonfinite`): every row has weight 1, and a row whose loss
    received no upstream gradient has factor 0."""
    dtype = torch.promote_types(k.logits.dtype, torch.float32)
    weight = torch.ones(k.logits.shape[:2], dtype=dtype, device=k.logits.device)
    target = None if target is None else Targets(dense=target)
    c = None
    if k.grad is not None:
        c = torch.zeros_like(weight) if k.factor is None else k.factor.to(weight.dtype)
    return responsibility_statistics(k.logits, target, weight, c, k.grad, sign, k.nonfinite)


RESPONSIBILITY_METRICS = ("mass", "entropy", "effective_k", "dead", "dominance", "scale")
"""The metrics every responsibility site reports, in the order its records list them."""


class ResponsibilityKind(SiteKind):
    r"""Shared metrics, gradient test, churn probe and record fields of responsibility sites.

    Metrics: `mass` (mean responsibility per component, $p_j$), `entropy`,
    `effective_k` $\exp H(p)$, `dead`, `dominance` $\max_j p_j$, `scale`
    (mean std of the logits), `rows`, `residual` and `nonfinite`; with targets also
    `wrong_entropy` and `wrong_top`. Probe: `churn`, the share of changed argmax
    assignments."""

    gradient_metrics = ("residual",)
    residual_metric = "residual"
    probe_metrics = ("churn",)

    def finish(self, stats: Stats, dead_fraction: float) -> dict[str, Tensor]:
        return finish_responsibility(stats, dead_fraction)

    def has_gradient(self, values: dict[str, Any]) -> bool:
        return values["n_grad"] > 0

    def probe_state(self, kept: Kept) -> dict[str, Tensor]:
        return {"assignment": kept.logits.argmax(-1)}

    def probe_statistics(
        self, now: dict[str, Tensor] | None, previous: dict[str, Tensor] | None
    ) -> Stats:
        if (
            now is None
            or previous is None
            or previous["assignment"].shape != now["assignment"].shape
        ):
            return {"churn_changed": torch.zeros(()), "churn_n": torch.zeros(())}
        return churn_stats(now["assignment"], previous["assignment"])

    def extras(self, values: dict[str, Any], max_components: int) -> dict[str, Any]:
        k = len(values["mass"])
        out: dict[str, Any] = {
            "K": k,
            "source": "gradient" if self.has_gradient(values) else "forward",
        }
        if k > max_components:  # the per-component lists are left out
            out.update((key, None) for key in ("mass", "label_share") if key in values)
        return out

r"""Streaming metrics of attention sites, as sufficient statistics (sums and maxima) of one step.

Attention (per query row $i$, key $j$): $g_i = \partial L/\partial o_i$,
$a_{ij} = g_i^\top v_j$, routing gradient $\partial L/\partial s_{ij} =
\alpha_{ij}(a_{ij} - \bar a_i)$ and value update $\partial L/\partial v_j = \sum_i \alpha_{ij} g_i$.
As in `implicit_em.trace.metrics`, every statistic is a sum or a maximum (keys ending in
`_max`) with a leading step axis, and `finish_attention` turns reduced statistics into metrics.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.trace.metrics import Stats, along, p_log_p, per_step

__all__ = ["attention_stats_steps", "drift_stats", "finish_attention"]


def _nonfinite_count(x: Tensor) -> Tensor:
    r"""The number of NaN or infinite entries of each step `x[s]` ($x \cdot 0$ is NaN
    exactly there)."""
    return per_step(torch.isnan(x * 0))


def _zero_nonfinite_rows(x: Tensor) -> Tensor:
    """`x` with every row (last axis) holding a NaN or infinity set to zero."""
    finite_rows = (x * 0).sum(-1, keepdim=True) == 0
    return torch.where(finite_rows, x, 0.0)


def attention_stats_steps(
    alpha: Tensor,
    v: Tensor | None = None,
    g: Tensor | None = None,
    grad_alpha: Tensor | None = None,
    used: Tensor | None = None,
    grad_v: Tensor | None = None,
    head_entropy: Tensor | None = None,
    tolerance: Tensor | None = None,
) -> Stats:
    r"""Sufficient statistics of the attention weights of `S` measurements on the traced rows.

    Every input has a leading step axis `S`, and so has every statistic.

    Parameters
    ----------
    alpha : Tensor
        $\alpha$, `[S, R, H, Lq, Lk]` (fully masked rows are zeros).
    v : Tensor, optional
        The values, `[S, R, H, Lk, Ev]`.
    g : Tensor, optional
        $\partial L/\partial o$, `[S, R, H, Lq, Ev]`.
    grad_alpha : Tensor, optional
        $\partial L/\partial\alpha$ when the weights were a tensor of the model (eager
        attention); then $a = \partial L/\partial\alpha$ exactly, else $a = g v^\top$.
    used : Tensor, optional
        The weights actually multiplied with `v` (after dropout), default `alpha`.
    grad_v : Tensor, optional
        Autograd's $\partial L/\partial v$ for the value-update identity residual, checked
        along the fixed random unit direction $u$ of `along`:
        $u\cdot(\alpha^\top g)_j = \sum_i \alpha_{ij}\,(u\cdot g_i)$, a matrix-vector product.
    head_entropy : Tensor, optional
        $\sum_i H(\alpha_i)$ over the rows of each head, `[S, H]` in float64, where the
        caller has it (from the scores: `weights_entropy_logit_max`); else it is
        $-\sum\alpha\log\alpha$ of `alpha`.
    tolerance : Tensor, optional
        The tolerance of the value-update residual, `[S]` (`residual_tolerance`). Where
        `grad_v` is given and every step's residual is within it, `value_sq` is
        $\lVert\partial L/\partial v\rVert^2$ (the same update, to within the tolerance)
        instead of the product $\alpha^\top g$; otherwise, and without it, the product.

    Returns
    -------
    Stats
        Sums: `rows`, `entropy` (and per head `head_entropy`), per head `sink` =
        $\sum_i \alpha_{i0}$ (the weight on key position 0), `routing_sq` =
        $\sum(\alpha\odot(a-\bar a))^2$, `value_sq` = $\sum_j\lVert\sum_i\alpha_{ij}g_i\rVert^2$,
        `nonfinite` gradient entries; maxima: `value_residual_max` =
        $\max_j|u\cdot((\alpha^\top g)_j - \partial L/\partial v_j)|$ and `grad_v_max` =
        $\max_j|u\cdot\partial L/\partial v_j|$.

    Notes
    -----
    Gradients are assumed finite first (no elementwise test: one check of the per-step sums
    at the end); only if one is not are the statistics recomputed with the non-finite rows of
    $a$ and entries of $g$ set aside and counted in `nonfinite`.
    """
    parts = (alpha, v, g, grad_alpha, used, grad_v, head_entropy, tolerance)
    stats = _attention_stats_steps(*parts, exact=False)
    sums = [stats[k] for k in ("routing_sq", "value_sq", "value_residual_max") if k in stats]
    if not sums or bool(torch.isfinite(torch.stack(sums)).all()):
        return stats
    return _attention_stats_steps(*parts, exact=True)


def _attention_stats_steps(
    alpha: Tensor,
    v: Tensor | None,
    g: Tensor | None,
    grad_alpha: Tensor | None,
    used: Tensor | None,
    grad_v: Tensor | None,
    head_entropy: Tensor | None,
    tolerance: Tensor | None,
    exact: bool,
) -> Stats:
    """The pass of `attention_stats_steps`; `exact` sets non-finite gradients aside."""
    s = alpha.shape[0]
    if head_entropy is None:
        head_entropy = -p_log_p(alpha).sum((1, 3, 4)).double()  # alpha >= 0
    rows = float(alpha[0].numel() // alpha.shape[-1])
    zero = torch.zeros(s, dtype=torch.float64, device=alpha.device)
    stats: Stats = {
        "rows": torch.full((s,), rows, dtype=torch.float64, device=alpha.device),
        "entropy": head_entropy.sum(-1),
        "head_entropy": head_entropy,
        "sink": alpha[..., 0].sum((1, 3)).double(),
        "nonfinite": zero,
    }
    used = alpha if used is None else used
    a = grad_alpha
    if a is None and g is not None and v is not None:
        a = g @ v.transpose(-2, -1)
    if a is not None:
        if exact:
            stats["nonfinite"] = stats["nonfinite"] + _nonfinite_count(a).double()
            a = _zero_nonfinite_rows(a)
        # alpha (a - abar) as alpha a - alpha abar, in place on a temporary `a`
        weighted = alpha * a if a is grad_alpha else a.mul_(alpha)
        abar = weighted.sum(-1, keepdim=True)
        routing = weighted.addcmul_(alpha, abar, value=-1.0)
        stats["routing_sq"] = _norm(routing).square_().double()
        stats["n_grad"] = torch.ones(s, dtype=torch.float64, device=alpha.device)
    if g is not None:
        if exact:
            stats["nonfinite"] = stats["nonfinite"] + _nonfinite_count(g).double()
            g = torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
        within = False
        if grad_v is not None:
            update, seen = _update_along(used, g), along(grad_v)
            residual = per_step((update - seen).abs_(), "amax")
            scale = per_step(seen.abs_(), "amax")
            stats["value_residual_max"], stats["grad_v_max"] = residual.double(), scale.double()
            within = tolerance is not None and bool((residual <= tolerance * scale).all())
        if within:
            stats["value_sq"] = _norm(grad_v).square_().double()
        else:
            stats["value_sq"] = _norm(used.transpose(-2, -1) @ g).square_().double()
    return stats


def _update_along(used: Tensor, g: Tensor) -> Tensor:
    r"""$u\cdot(\alpha^\top g)_j = \sum_i \alpha_{ij}\,(u\cdot g_i)$ for the weights `used`
    `[..., Lq, Lk]` and `g` `[..., Lq, Ev]`, as `[..., Lk]`: a row vector times a matrix
    instead of the product $\alpha^\top g$."""
    gu = along(g).unsqueeze(-2)
    dtype = torch.promote_types(gu.dtype, used.dtype)
    return (gu.to(dtype) @ used.to(dtype)).squeeze(-2)


def _norm(x: Tensor) -> Tensor:
    r"""The Euclidean norm of each step `x[s]` over all its other axes, in one pass without
    a temporary."""
    return torch.linalg.vector_norm(x.reshape(x.shape[0], -1), dim=-1)


def finish_attention(stats: Stats) -> dict[str, Tensor]:
    r"""Metrics from reduced attention statistics: mean entropy (nats, overall and per head),
    per head the mean weight on key position 0 (`sink_share`) and the largest scaled score
    (`max_logit`, from `max_logit_max` where the kind gives it), routing-gradient and value-update norms $\lVert\alpha\odot(a-\bar a)\rVert_F$,
    $\lVert\alpha^\top g\rVert_F$ and their ratio, the relative value-update residual and,
    where the kind gives it, the attention dropout probability (`dropout`).
    Statistics may carry a leading step axis (as from `attention_stats_steps`)."""
    rows = stats["rows"].clamp_min(1)
    heads = stats["head_entropy"].shape[-1]
    out = {
        "entropy": stats["entropy"] / rows,
        "head_entropy": stats["head_entropy"] * heads / rows.unsqueeze(-1),
        "sink_share": stats["sink"] * heads / rows.unsqueeze(-1),
        "rows": stats["rows"],
    }
    if "max_logit_max" in stats:
        out["max_logit"] = stats["max_logit_max"]
    if "routing_sq" in stats:
        out["routing_norm"] = stats["routing_sq"].sqrt()
        out["n_grad"] = stats["n_grad"]
        out["nonfinite"] = stats["nonfinite"]
    if "value_sq" in stats:
        out["value_norm"] = stats["value_sq"].sqrt()
        out["nonfinite"] = stats["nonfinite"]
        if "routing_sq" in stats:
            out["routing_value_ratio"] = out["routing_norm"] / out["value_norm"].clamp_min(1e-300)
    if "value_residual_max" in stats:
        out["value_residual"] = stats["value_residual_max"] / stats["grad_v_max"].clamp_min(1e-300)
    if "alpha_residual_max" in stats:
        out["alpha_residual"] = stats["alpha_residual_max"] / stats["output_max"].clamp_min(1e-300)
    if "tolerance_max" in stats:
        out["tolerance"] = stats["tolerance_max"]
    if "dropout_max" in stats:
        out["dropout"] = stats["dropout_max"]
    return out


def drift_stats(
    alpha: Tensor, alpha_prev: Tensor, v: Tensor | None, v_prev: Tensor | None
) -> Stats:
    r"""Two-timescale drift on a probe batch between two measurements (sums).

    Attention drift: total variation $\tfrac12\sum_j|\alpha_{ij} - \alpha'_{ij}|$ summed over
    query rows; value drift: $\lVert v - v'\rVert_F^2$ and $\lVert v'\rVert_F^2$
    (reported as the relative change $\lVert v - v'\rVert_F/\lVert v'\rVert_F$).
    """
    stats: Stats = {
        "drift_tv": (0.5 * (alpha - alpha_prev).abs().sum(-1)).sum().double(),
        "drift_rows": torch.tensor(
            float(alpha.numel() // alpha.shape[-1]), dtype=torch.float64, device=alpha.device
        ),
    }
    if v is not None and v_prev is not None:
        stats["value_diff_sq"] = ((v - v_prev) ** 2).sum().double()
        stats["value_prev_sq"] = (v_prev**2).sum().double()
    return stats

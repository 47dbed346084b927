r"""Streaming metrics of a traced site, as sufficient statistics (sums and maxima) of one step.

Every site reduces its tensors to a small dict of *statistics*: sums over rows (`n`,
`mass`, `entropy`, ...) and maxima (keys ending in `_max`). Statistics add across calls,
ranks and batches (one `all_reduce` each, pomegranate-style), and `finish_responsibility`
(`finish_attention` for attention) turns the reduced statistics into the reported metrics.

Responsibilities read from gradients. For a loss $\ell = \sum_i c_i\,\ell_i$ over rows
with per-row factor $c_i$ ($1/B$ for a mean, the upstream gradient and class weight
in general) and logits $z_i$:

* cross-entropy, $\partial\ell/\partial z_{ij} = c_i (r_{ij} - t_{ij})$, so
  $r_{ij} = t_{ij} + \partial\ell/\partial z_{ij} / c_i$ ($r = B\,\partial L/\partial z + y$);
* cross-entropy over distances $z = -d$: $r_{ij} = t_{ij} - \partial\ell/\partial d_{ij} / c_i$;
* mixture NLL over distances: $\partial\ell/\partial d_{ij} = c_i r_{ij}$, so $r = \partial\ell/\partial d / c$.

The statistics of attention sites are in `implicit_em.trace.attention_metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "Stats",
    "Targets",
    "along",
    "churn_stats",
    "entropy",
    "finish_probe",
    "finish_responsibility",
    "log_partition",
    "log_z_stats",
    "p_log_p",
    "per_step",
    "read_responsibilities",
    "residual_tolerance",
    "responsibility_stats_steps",
]

Stats = dict[str, Tensor]


def entropy(p: Tensor, dim: int = -1) -> Tensor:
    r"""$H(p) = -\sum_j p_j \log p_j$ along `dim` in nats, with $0 \log 0 = 0$.

    Entries $p_j \le 0$ (round-off in responsibilities read from gradients) contribute 0.
    """
    return -p_log_p(p.clamp_min(0)).sum(dim=dim)


def residual_tolerance(dtype: torch.dtype, steps: int, device: torch.device) -> Tensor:
    r"""The tolerance of an identity residual read from tensors of `dtype`,
    $\max(10^{-4}, 4\epsilon_{\text{dtype}})$ (float32 and float64 $10^{-4}$, float16
    $3.9\cdot10^{-3}$, bfloat16 $3.1\cdot10^{-2}$), as a maximum statistic `tolerance_max`
    `[steps]`. Round-off stays orders of magnitude below it; a gradient shared with
    another loss does not."""
    value = max(1e-4, 4 * torch.finfo(dtype).eps) if dtype.is_floating_point else 1e-4
    return torch.full((steps,), value, dtype=torch.float64, device=device)


def p_log_p(p: Tensor) -> Tensor:
    r"""$p \log p$ of non-negative `p` (0 at 0), as $p \log\max(p, \text{tiny})$:
    this changes nothing representable ($|p \log p| < 10^{-36}$ below the smallest normal
    float) and is several times faster than `torch.special.xlogy` or `entr`."""
    return p.clamp_min(torch.finfo(p.dtype).tiny).log_().mul_(p)


@dataclass(frozen=True)
class Targets:
    r"""The targets of `[..., N, K]` rows, weighed as `F.cross_entropy` weighs them.

    With label smoothing $s$ the target is $t' = (1 - s)\,t^0 + s/K$, where $t^0$ is the
    one-hot vector of the class indices `labels` `[..., N]` or the distribution `dense`
    `[..., N, K]` (exactly one is given). With class weights $w$ (`class_weight`, `[..., K]`)
    a row's loss is $-\sum_j w_j t'_{ij}\log p_{ij}$ and its gradient $a_i p_i - w\odot t'_i$,
    with the *row weight* $a_i = \sum_j w_j t'_{ij}$: responsibilities are read against
    $t_i = w\odot t'_i / a_i$. Without class weights $a_i = 1$ and $t = t'$.
    """

    labels: Tensor | None = None
    dense: Tensor | None = None
    smoothing: float = 0.0
    class_weight: Tensor | None = None

    def _smoothed(self, like: Tensor) -> Tensor:
        """$t'$ as a dense tensor (only for the weighted distribution case)."""
        return self.dense.to(like.dtype) * (1.0 - self.smoothing) + self.smoothing / like.shape[-1]

    def row_weight(self, like: Tensor) -> Tensor | None:
        """$a_i$, `[..., N]`, or None without class weights (every $a_i = 1$); `like`: the
        `[..., N, K]` rows."""
        w = self.class_weight
        if w is None:
            return None
        w = w.to(like.dtype)
        if self.labels is None:
            return (self._smoothed(like) * w.unsqueeze(-2)).sum(-1)
        a = w.gather(-1, self.labels) * (1.0 - self.smoothing)
        return a + self.smoothing / like.shape[-1] * w.sum(-1, keepdim=True)

    def add_to(self, r: Tensor) -> Tensor:
        """`r += t` in place; returns `r`."""
        keep, spread = 1.0 - self.smoothing, self.smoothing / r.shape[-1]
        y = None if self.labels is None else self.labels.unsqueeze(-1)
        if self.class_weight is None:
            if y is not None:
                r.scatter_add_(-1, y, r.new_full(y.shape, keep))
            else:
                r.add_(self.dense.to(r.dtype), alpha=keep)
            return r.add_(spread) if self.smoothing else r
        w = self.class_weight.to(r.dtype).unsqueeze(-2)  # [..., 1, K]
        a = self.row_weight(r).unsqueeze(-1)  # [..., N, 1]
        if y is None:
            return r.add_(self._smoothed(r) * w / a)
        r.scatter_add_(-1, y, w.expand_as(r).gather(-1, y) * keep / a)
        return r.add_(w * spread / a) if self.smoothing else r

    def right(self) -> Tensor:
        """The index of each row's largest target (its class), `[..., N]`."""
        return self.labels if self.labels is not None else self.dense.argmax(-1)


def read_responsibilities(
    grad: Tensor, row_factor: Tensor, target: Targets | Tensor | None, sign: float
) -> Tensor:
    r"""Responsibilities read from a loss gradient: $r = t + \text{sign}\cdot\nabla / c$.

    Parameters
    ----------
    grad : Tensor
        $\partial\ell/\partial z$ (or $\partial\ell/\partial d$), `[N, K]`.
    row_factor : Tensor
        $c_i$, `[N]`; rows with $c_i = 0$ give zeros (no information).
    target : Targets, Tensor or None
        $t$ (a `[N, K]` distribution or `Targets`), or `None` for the mixture NLL ($t = 0$).
    sign : float
        `+1` for logits (and mixture distances), `-1` for cross-entropy over distances.

    Returns
    -------
    Tensor
        $r$, `[N, K]`.
    """
    informative = row_factor != 0
    r = grad * (sign / torch.where(informative, row_factor, 1.0)).unsqueeze(-1)
    if target is not None:
        (target if isinstance(target, Targets) else Targets(dense=target)).add_to(r)
    if bool(informative.all()):
        return r
    return r.masked_fill_(~informative.unsqueeze(-1), 0.0)  # a NaN row too


def responsibility_stats_steps(
    r: Tensor, valid: Tensor, right: Tensor | None, logits: Tensor
) -> Stats:
    r"""Sufficient statistics of the responsibilities of `S` measurements: `r` and `logits`
    are `[S, N, K]`, `valid` and `right` (the index $y_i$ of each row's target class, or
    None) are `[S, N]`; every statistic has a leading axis `S`. `r` must be finite; it is
    overwritten (its invalid rows count as zeros).

    `n` = valid rows, `mass` = $\sum_i r_i$ (per component), `entropy` =
    $\sum_i H(r_i)$, the wrong-class spread (with a target: $w_{ij} \propto r_{ij}$ over
    $j \ne y_i$, summing $H(w_i)$ in `wrong_entropy` and $\max_j w_{ij}$ in `wrong_top`
    over the `n_wrong` rows with wrong-class mass), and `scale` =
    $\sum_i \operatorname{std}_j z_{ij}$ over finite logits (the distance scale).

    With $r^+ = \max(r, 0)$, $T_i = \sum_{j \ne y_i} r^+_{ij}$ and
    $w_i = r^+_{i,j \ne y_i} / T_i$, the wrong-class entropy is
    $H(w_i) = \log T_i - \frac{1}{T_i}\sum_{j \ne y_i} r^+_{ij}\log r^+_{ij}$, so one pass
    of $r \log r$ serves both entropies. With a target, `label_count` counts the valid rows
    whose target class is $j$ (per component).
    """
    w = valid.to(r.dtype)
    if not bool(valid.all()):
        r.mul_(valid.unsqueeze(-1))
    stats: Stats = {
        "n": w.sum(-1),
        "mass": r.sum(-2),
        "scale": (_row_std(logits).to(r.dtype) * w).sum(-1),
    }
    if right is not None:
        stats["label_count"] = torch.zeros_like(stats["mass"]).scatter_add_(-1, right, w)
    r_log_r = p_log_p(r.clamp_min_(0.0))
    row_r_log_r = r_log_r.sum(-1)
    stats["entropy"] = -row_r_log_r.sum(-1)
    if right is not None:
        y = right.unsqueeze(-1)
        wrong_r_log_r = row_r_log_r - r_log_r.gather(-1, y).squeeze(-1)
        wrong = r.scatter_(-1, y, 0.0)
        total = wrong.sum(-1)
        has = (total > 0) & valid
        safe = torch.where(has, total, 1.0)
        top = wrong.amax(-1) / safe
        hw = has.to(r.dtype)
        stats["n_wrong"] = hw.sum(-1)
        wrong_entropy = (safe.log() - wrong_r_log_r / safe).clamp_min(0.0)  # >= 0 but round-off
        stats["wrong_entropy"] = (wrong_entropy * hw).sum(-1)
        stats["wrong_top"] = (top * hw).sum(-1)
    return stats


def _row_std(z: Tensor) -> Tensor:
    """The standard deviation of each row's finite entries (last axis; 0 for a row without)."""
    total = z.sum(-1, keepdim=True)
    if bool(torch.isfinite(total).all()):  # no row holds a NaN or an infinity
        return torch.linalg.vector_norm(z - total / z.shape[-1], dim=-1) / math.sqrt(z.shape[-1])
    finite = torch.isfinite(z)
    z = torch.where(finite, z, 0.0)
    count = finite.sum(-1, keepdim=True).clamp_min(1).to(z.dtype)
    deviation = torch.where(finite, z - z.sum(-1, keepdim=True) / count, 0.0)
    return (deviation.square().sum(-1, keepdim=True) / count).sqrt().squeeze(-1)


def finish_responsibility(stats: Stats, dead_fraction: float) -> dict[str, Tensor]:
    r"""Metrics from reduced statistics: mean mass $p = \text{mass}/n$, mean entropy,
    effective number of components $\exp H(p)$, dead components ($p_j <$
    `dead_fraction`$/K$; with targets, the label share $q_j$ = `label_count`$/n$ and the
    classes that occur among them with $p_j <$ `dead_fraction`$\cdot q_j$), dominance
    $\max_j p_j$, wrong-class entropy and top share,
    distance scale, the identity residual $\max|r_{\text{grad}} - r_{\text{fwd}}|$ and,
    where the statistics have them, the mean and largest $\log Z_i = \operatorname{LSE}(z_i)$
    (`log_z`, `log_z_max`) and the mean target logit $z_{i,y_i}$ (`label_logit`).
    Statistics may carry a leading step axis (as from `responsibility_stats_steps`).
    """
    n = stats["n"].clamp_min(1)
    p = stats["mass"] / n.unsqueeze(-1)
    k = p.shape[-1]
    out = {
        "mass": p,
        "entropy": stats["entropy"] / n,
        "effective_k": entropy(p).exp(),
        "dead": (p < dead_fraction / k).sum(-1).to(p.dtype),
        "dominance": p.amax(-1),
        "scale": stats["scale"] / n,
        "rows": stats["n"],
    }
    if "label_count" in stats:
        q = stats["label_count"] / n.unsqueeze(-1)
        out["label_share"] = q
        out["dead"] = ((q > 0) & (p < dead_fraction * q)).sum(-1).to(p.dtype)
    if "n_wrong" in stats:
        nw = stats["n_wrong"].clamp_min(1)
        out["wrong_entropy"] = stats["wrong_entropy"] / nw
        out["wrong_top"] = stats["wrong_top"] / nw
    for key in ("residual_max", "tolerance_max", "nonfinite", "n_grad"):
        if key in stats:
            out[key.removesuffix("_max")] = stats[key]
    if "n_z" in stats:
        out["log_z"] = stats["log_z"] / stats["n_z"].clamp_min(1)
        if "label_logit" in stats:
            out["label_logit"] = stats["label_logit"] / stats["n_z"].clamp_min(1)
        out["log_z_max"] = torch.where(stats["n_z"] > 0, stats["log_z_max"], 0.0)
    return out


def log_partition(logits: Tensor, probs: Tensor) -> Tensor:
    r"""$\log Z_i = \operatorname{LSE}_j z_{ij}$ of logits `[..., K]` from their softmax
    `probs`: the largest probability is $e^{\max_j z_{ij} - \log Z_i}$, so
    $\log Z_i = \max_j z_{ij} - \log\max_j p_{ij}$ (two reductions instead of another
    pass of exponentials; $\max_j p_{ij} \ge 1/K$, so the logarithm is well conditioned).
    Not finite for a row holding a NaN or an infinity."""
    return logits.amax(-1) - probs.amax(-1).log()


def log_z_stats(lse: Tensor, rows: Tensor, label_logit: Tensor | None = None) -> Stats:
    r"""$\log Z_i$ (`lse`, `[S, N]`, e.g. `log_partition`) of the `rows` (`[S, N]`, boolean)
    whose $\log Z_i$ is finite: their number `n_z`, the sum `log_z` and the
    maximum `log_z_max` ($-\infty$ without such a row), each `[S]` in float64; with the
    target logits $z_{i,y_i}$ (`label_logit`, `[S, N]`), their sum over the same rows."""
    rows = rows & torch.isfinite(lse)
    stats = {
        "n_z": rows.sum(-1).double(),
        "log_z": torch.where(rows, lse, 0.0).sum(-1).double(),
        "log_z_max": torch.where(rows, lse, -torch.inf).amax(-1).double(),
    }
    if label_logit is not None:
        stats["label_logit"] = torch.where(rows, label_logit, 0.0).sum(-1).double()
    return stats


_DIRECTIONS: dict[tuple[int, torch.dtype, torch.device], Tensor] = {}


def _direction(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A fixed random unit vector of length `n` (seeded: the same in every run)."""
    u = _DIRECTIONS.get((n, dtype, device))
    if u is None:
        u = torch.randn(n, generator=torch.Generator().manual_seed(n)).double()
        u = (u / u.norm()).to(device, dtype)
        _DIRECTIONS[(n, dtype, device)] = u
    return u


def along(t: Tensor) -> Tensor:
    r"""$u \cdot t$ over the last axis, for the fixed random unit direction $u$ of its length
    (`[...]` from `[..., n]`), in at least float32. An identity checked along $u$ fails
    wherever it fails in full, with probability 1."""
    dtype = torch.promote_types(t.dtype, torch.float32)
    return t.to(dtype) @ _direction(t.shape[-1], dtype, t.device)


def per_step(x: Tensor, op: str = "sum") -> Tensor:
    """Sum (or max, `op="amax"`) over every axis but the leading step axis."""
    flat = x.reshape(x.shape[0], -1)
    return flat.sum(-1) if op == "sum" else flat.amax(-1)


def churn_stats(current: Tensor, previous: Tensor) -> Stats:
    """Assignment churn on a probe batch: how many argmax assignments changed (sums)."""
    return {
        "churn_changed": (current != previous).sum().double(),
        "churn_n": torch.tensor(float(current.numel()), dtype=torch.float64, device=current.device),
    }


def finish_probe(stats: Stats) -> dict[str, Tensor]:
    """Probe metrics from reduced statistics: `churn` (share of changed argmax assignments),
    `attention_drift` (mean total variation per query row) and `value_drift` (relative)."""
    out: dict[str, Tensor] = {}
    if "churn_n" in stats:
        out["churn"] = stats["churn_changed"] / stats["churn_n"].clamp_min(1)
    if "drift_rows" in stats:
        out["attention_drift"] = stats["drift_tv"] / stats["drift_rows"].clamp_min(1)
    if "value_prev_sq" in stats:
        out["value_drift"] = (
            stats["value_diff_sq"] / stats["value_prev_sq"].clamp_min(1e-300)
        ).sqrt()
    return out

r"""What the attention kinds (SDPA, eager softmax, `nn.MultiheadAttention`) share.

Each kind keeps the first `max_rows` batch rows of its site and produces the weights
$\alpha$ `[S, R, H, Lq, Lk]` (kept, or recomputed from `q`, `k` and the mask), the
values $v$, the output gradient $g = \partial L/\partial o$ and, where it has them,
$\partial L/\partial\alpha$ and autograd's $\partial L/\partial v$; the statistics are
`attention_stats_steps` of those. A kind that recomputes the
weights also checks them: the *forward residual* compares the output rebuilt from
$\alpha$ and $v$ with the output the model computed (`forward_residual`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from implicit_em.attention import attention_scores
from implicit_em.core import responsibilities
from implicit_em.trace.attention_metrics import drift_stats, finish_attention
from implicit_em.trace.metrics import Stats, per_step
from implicit_em.trace.sites.base import Kept, SiteKind

__all__ = [
    "AttentionKind",
    "attention_weights",
    "causal_scores",
    "forward_residual",
    "head_max",
    "heads",
    "shifted_scores_entropy",
    "weights_entropy_logit_max",
]


def _scores(
    q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool, scale: float | None
) -> tuple[Tensor, Tensor]:
    """The scores `attention_scores(q, k, ...)` in at least float32, and their softmax along
    the last axis (rows a mask excludes entirely are zeros)."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    s = attention_scores(q.to(dtype), k.to(dtype), mask, is_causal, scale)
    masked = mask is not None or is_causal
    return s, responsibilities(-s) if masked else torch.softmax(s, dim=-1)


def attention_weights(
    q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool, scale: float | None
) -> Tensor:
    r"""$\alpha = \operatorname{softmax}(s)$ of `attention_scores(q, k, ...)` along the
    last axis, in at least float32 (rows a mask excludes entirely are zeros)."""
    return _scores(q, k, mask, is_causal, scale)[1]


def weights_entropy_logit_max(
    q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool, scale: float | None
) -> tuple[Tensor, Tensor | None, Tensor]:
    r"""`attention_weights` $\alpha$ of stacked `q`, `k` (`[S, R, H, L, E]`), the sum over
    rows of each head's entropy $\sum_i H(\alpha_i)$ (`[S, H]`, float64; None where it is
    left to `attention_stats_steps`) and `head_max` of their scores, `[S, H]`.

    Without an explicit `mask` (causal or not, no row is excluded entirely), the scores
    come shifted by each row's maximum $m_i = \max_j s_{ij}$, $t_{ij} = s_{ij} - m_i \le 0$
    (a causally masked score is the most negative finite number instead of $-\infty$,
    `causal_scores`: its weight is 0 all the same), and the entropy is
    `shifted_scores_entropy` of them, without an elementwise logarithm. A score that is
    not finite makes that entropy NaN (an infinite $m_i$, or $0\cdot(-\infty)$), and one
    check of the sums sends such scores, and an explicit mask, the careful way: the weights
    of the masked scores, and None."""
    if mask is None:
        dtype = torch.promote_types(q.dtype, torch.float32)
        q, k = q.to(dtype), k.to(dtype)
        s = causal_scores(q, k, scale) if is_causal else attention_scores(q, k, None, False, scale)
        row_max = s.amax(dim=-1, keepdim=True)
        logit_max = row_max.squeeze(-1).amax(dim=(1, 3))
        alpha = torch.softmax(s.sub_(row_max), dim=-1)
        head_entropy = shifted_scores_entropy(alpha, s)
        if bool(torch.isfinite(head_entropy.sum() + logit_max.sum())):
            return alpha, head_entropy, logit_max.double()
    s, alpha = _scores(q, k, mask, is_causal, scale)
    return alpha, None, head_max(s)


def shifted_scores_entropy(alpha: Tensor, shifted: Tensor) -> Tensor:
    r"""$\sum_i H(\alpha_i)$ over the rows of each head, `[S, H]` in float64, of weights
    $\alpha = \operatorname{softmax}(t)$ `[S, R, H, Lq, Lk]` from scores shifted by each
    row's maximum, $t_{ij} = s_{ij} - \max_k s_{ik} \le 0$ (`shifted`, overwritten).

    With $Z_i = \sum_j e^{t_{ij}}$, $\log\alpha_{ij} = t_{ij} - \log Z_i$ and the largest
    weight is $e^0/Z_i$, so $H(\alpha_i) = \log Z_i - \sum_j \alpha_{ij} t_{ij}
    = -\log\max_j\alpha_{ij} - \sum_j\alpha_{ij} t_{ij}$: two non-negative terms (no
    cancellation), one reduction and one product instead of a pass of logarithms. NaN where
    a shifted score is not finite."""
    top = alpha.amax(dim=-1).log_().sum(dim=(1, 3))
    return -(top + shifted.mul_(alpha).sum(dim=(1, 3, 4))).double()


def causal_scores(q: Tensor, k: Tensor, scale: float | None) -> Tensor:
    r"""Scores $s_{ij} = \text{scale}\cdot q_i\cdot k_j$ (`scale` $1/\sqrt{E}$ when None) of
    queries `[..., Lq, E]` and keys `[..., Lk, E]`, as `[..., Lq, Lk]`, with every key after
    its query ($j > i$) at the most negative finite number: the product and the mask in one batched
    `baddbmm` (a finite score plus that number rounds to it)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    lk = k.shape[-2]
    bias = _causal_bias(q.shape[-2], lk, q.dtype, q.device)
    s = torch.baddbmm(bias, q.flatten(0, -3), k.flatten(0, -3).transpose(-2, -1), alpha=scale)
    return s.view(*q.shape[:-1], lk)


@functools.lru_cache(maxsize=1)
def _causal_bias(lq: int, lk: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    r"""`[lq, lk]`: 0 where key $j \le$ query $i$, else the most negative finite number
    (the last one made is reused: one shape per model, as a rule; nothing writes to it)."""
    above = torch.ones(lq, lk, dtype=torch.bool, device=device).triu(1)
    bias = torch.zeros(lq, lk, dtype=dtype, device=device)
    return bias.masked_fill_(above, torch.finfo(dtype).min)


def head_max(s: Tensor) -> Tensor:
    r"""The largest finite entry of each head of scores `[S, R, H, Lq, Lk]`, `[S, H]` in
    float64 (a masked entry, $-\infty$, never counts; $-\infty$ for a head without one)."""
    s = torch.where(torch.isfinite(s), s, -torch.inf)
    return s.amax(dim=(1, 3, 4)).double()


def heads(t: Tensor) -> Tensor:
    """Attention tensors as `[B, H, L, E]`: a missing head axis becomes H = 1, several
    leading axes one."""
    if t.dim() == 3:
        return t.unsqueeze(1)
    if t.dim() > 4:
        return t.reshape(t.shape[0], -1, *t.shape[-2:])
    return t


def forward_residual(rebuilt: Tensor, seen: Tensor) -> Stats:
    r"""The forward residual of `S` stacked sites: the output $\hat y$ rebuilt from the
    weights against the output $y$ the model computed, both seen along a fixed random unit
    direction $u$ (already applied: `rebuilt` and `seen` are $u\cdot\hat y_i$,
    $u\cdot y_i$, leading step axis). Statistics `alpha_residual_max` =
    $\max_i|u\cdot(\hat y_i - y_i)|$ and `output_max` = $\max_i|u\cdot y_i|$
    (a rebuild that differs from $y$ differs along a random $u$ with probability 1)."""
    return {
        "alpha_residual_max": per_step((rebuilt - seen).abs(), "amax").double(),
        "output_max": per_step(seen.abs(), "amax").double(),
    }


class AttentionKind(SiteKind):
    r"""Shared metrics, gradient test and drift probe of attention sites.

    Metrics: `entropy` (mean over heads and queries, nats), `head_entropy` (per head),
    `max_logit` (per head, the largest scaled score $q\cdot k/\sqrt{E}$ over the traced rows),
    `sink_share` (per head, the mean weight on key position 0), `rows`; with the gradient `routing_norm` $\lVert\alpha\odot(a-\bar a)\rVert_F$,
    `value_norm` $\lVert\alpha^\top g\rVert_F$, their ratio, `value_residual` and
    `nonfinite`; with recomputed weights `alpha_residual`. Probe: `attention_drift` and
    `value_drift`. Subclasses implement `weights_and_values` for one kept record."""

    type = "attention"
    metrics = (
        "entropy",
        "head_entropy",
        "max_logit",
        "sink_share",
        "rows",
        "routing_norm",
        "nonfinite",
        "value_norm",
        "routing_value_ratio",
        "value_residual",
        "alpha_residual",
    )
    gradient_metrics = (
        "routing_norm",
        "value_norm",
        "routing_value_ratio",
        "value_residual",
        "nonfinite",
    )
    residual_metric = "value_residual"
    probe_metrics = ("attention_drift", "value_drift")

    def weights_and_values(self, kept: Kept) -> tuple[Tensor, Tensor | None]:
        """The weights `[R, H, Lq, Lk]` and values `[R, H, Lk, Ev]` of one record."""
        raise NotImplementedError

    def finish(self, stats: Stats, dead_fraction: float) -> dict[str, Tensor]:
        return finish_attention(stats)

    def has_gradient(self, values: dict[str, Any]) -> bool:
        return values.get("n_grad", 0.0) > 0

    def probe_state(self, kept: Kept) -> dict[str, Tensor]:
        with torch.no_grad():
            alpha, v = self.weights_and_values(kept)
        state = {"alpha": alpha.to(torch.float32, copy=True)}  # copies: `kept` is reused
        if v is not None:
            state["v"] = v.to(torch.float32, copy=True)
        return state

    def probe_statistics(
        self, now: dict[str, Tensor] | None, previous: dict[str, Tensor] | None
    ) -> Stats:
        zero = torch.zeros(())
        if now is None or previous is None or previous["alpha"].shape != now["alpha"].shape:
            return dict.fromkeys(("drift_tv", "drift_rows", "value_diff_sq", "value_prev_sq"), zero)
        v, v_prev = now.get("v"), previous.get("v")
        if v is None or v_prev is None or v.shape != v_prev.shape:
            v = v_prev = None
        stats = drift_stats(now["alpha"], previous["alpha"], v, v_prev)
        stats.setdefault("value_diff_sq", zero)
        stats.setdefault("value_prev_sq", zero)
        return stats

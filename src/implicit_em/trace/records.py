r"""Records of measured sites (the alarms raised from them: `implicit_em.trace.alarms`).

A record is a flat dict, one row of `History.to_pandas`: a *site record* per traced site and
measured step, and an *alarm record* per collapse alarm. A metric that could not be measured
on a step is `None` (never zero) and named in `missing`. The guide (`docs/trace.md`) explains
how to read each metric.

**Every site record**

| field | type | meaning |
|---|---|---|
| `kind` | str | `"site"` |
| `step` | int | the training step of the measurement (`Tracer.step_index`, counted from 0) |
| `site` | str | the site's name, by module path: `lm_head.ce`, `head.mixture`, `transformer.h.3.attn` (`#2`, `#3` for a name seen again in one step) |
| `type` | str | `"classification"`, `"mixture"`, `"attention"` or `"router"` |
| `missing` | list of str | the metrics that are `None` on this step: gradient metrics when no backward pass reached the site, probe metrics on the first measurement or when the probe did not reach the site |
| `reason` | str | only for a site present in the step that its kind cannot measure (e.g. an `nn.MultiheadAttention` with `bias_k`): why; every metric is then `None` |
| `tolerance` | float or None | the tolerance of the site's identity residual, $\max(10^{-4}, 4\epsilon)$ of its dtype |
| `exact` | bool or None | the identity residual (`residual`; `value_residual` for attention) is within `tolerance`; `None` without one. Alarms are never raised from a record with `exact` False |

Probe metrics (`churn`, `attention_drift`, `value_drift`) are fields only when the tracer has
a `probe`; gradient metrics are `None` when no backward pass reached the site.

**Responsibility sites** (`type` `"classification"` or `"mixture"`). Over the $N$ rows with
a finite gradient and a non-zero loss factor, with $r_i$ the responsibilities read from the
gradient (the forward softmax when `source` is `"forward"`), $z_i$ the logits ($-d_i$ for
distances) and $p_j = \frac1N\sum_i r_{ij}$:

| field | type | meaning |
|---|---|---|
| `mass` | list of float or None | $p_j$ per component; `None` when $K$ exceeds `max_components` |
| `entropy` | float | $\frac1N\sum_i H(r_i)$, $H(r) = -\sum_j r_j\log r_j$ (nats) |
| `effective_k` | float | $\exp H(p)$, the number of components the batch uses |
| `dead` | float | $\#\{j : p_j < \text{dead\_fraction}/K\}$, components that (almost) never win; classification: $\#\{j : q_j > 0, p_j < \text{dead\_fraction}\cdot q_j\}$, classes among the targets that (almost) never win |
| `label_share` | list of float or None | classification only: $q_j$, the share of the rows whose target class is $j$; `None` when $K$ exceeds `max_components` |
| `dominance` | float | $\max_j p_j$, the share of the busiest component |
| `scale` | float | $\frac1N\sum_i \operatorname{std}_j z_{ij}$ over finite logits, the distance scale |
| `log_z` | float | the mean of $\log Z_i = \operatorname{LSE}_j z_{ij}$ over the rows of positive weight (the logits' log-partition; the per-sample log-likelihood of a mixture) |
| `log_z_max` | float | the largest $\log Z_i$ |
| `label_logit` | float | classification only: the mean target logit $z_{i,y_i}$ over the same rows ($\log Z_i = z_{i,y_i} + \ell_i$) |
| `rows` | float | $N$ (of the sampled rows when the site has more than `max_responsibility_rows`) |
| `residual` | float | gradient: $\max_i \max_j \lvert r_{ij} - \operatorname{softmax}(z_i)_j\rvert$, the identity C1/R4 on this step |
| `nonfinite` | float | rows with a non-finite gradient (among all rows), excluded from every average |
| `wrong_entropy` | float | classification only, gradient: mean $H(w_i)$ with $w_{ij} \propto r_{ij}$ over $j \neq \arg\max_j t_{ij}$ |
| `wrong_top` | float | classification only, gradient: mean $\max_j w_{ij}$ |
| `K` | int | the number of components |
| `source` | str | `"gradient"`, or `"forward"` when no backward pass reached the site |
| `churn` | float | probe: the share of probe rows whose $\arg\max_j z_{ij}$ changed since the previous measurement |

**Attention sites** (`type` `"attention"`). On the first `max_rows` batch rows, with weights
$\alpha$ (recomputed for SDPA and `nn.MultiheadAttention`), values $v$, output gradient
$g_i = \partial L/\partial o_i$ and $a_{ij} = g_i^\top v_j$ (or $\partial L/\partial\alpha_{ij}$
where the weights are a tensor of the model):

| field | type | meaning |
|---|---|---|
| `entropy` | float | mean over heads and queries of $H(\alpha_i)$ (nats) |
| `head_entropy` | list of float | the same per head |
| `max_logit` | list of float | per head, the largest scaled score $s_{ij} = q_i\cdot k_j/\sqrt{E_h}$ (plus any additive mask; masked entries left out) over the traced rows and queries; eager attention: the largest finite input of its softmax |
| `sink_share` | list of float | per head, the mean over traced rows and queries of $\alpha_{i0}$, the weight on key position 0 |
| `rows` | float | traced rows × heads × queries |
| `routing_norm` | float | gradient: $\lVert \alpha \odot (a - \bar a)\rVert_F$, $\bar a_i = \sum_j \alpha_{ij} a_{ij}$, the E-step-like update of the scores |
| `value_norm` | float | gradient: $\lVert \alpha^\top g\rVert_F$, the M-step-like update of the values (read as $\lVert\partial L/\partial v\rVert_F$ where `value_residual` is within `tolerance`) |
| `routing_value_ratio` | float | gradient: `routing_norm / value_norm` |
| `value_residual` | float or None | gradient: $\max_j\lvert u\cdot((\alpha^\top g)_j - \partial L/\partial v_j)\rvert / \max_j\lvert u\cdot\partial L/\partial v_j\rvert$ along the fixed random unit vector $u$ (as `alpha_residual`); `None` for `nn.MultiheadAttention` |
| `alpha_residual` | float or None | $\max_i \lvert u\cdot(\hat o_i - o_i)\rvert / \max_i\lvert u\cdot o_i\rvert$ along a fixed random unit vector $u$: how well the recomputed weights rebuild the model's output $o$ (SDPA, `nn.MultiheadAttention`; large under attention dropout); `None` for eager attention, whose weights are its own |
| `nonfinite` | float | gradient: non-finite gradient entries, excluded |
| `dropout` | float | SDPA only: the call's `dropout_p` (0 in eval mode); above 0 neither residual holds, and the alarm rules still read the record (they read statistics of the scores, which dropout leaves unchanged) |
| `attention_drift` | float | probe: mean total variation $\frac12\sum_j\lvert\alpha_{ij}-\alpha'_{ij}\rvert$ per query since the previous measurement |
| `value_drift` | float | probe: $\lVert v - v'\rVert_F / \lVert v'\rVert_F$ since the previous measurement |

**Router sites** (`type` `"router"`). Over the sampled token rows with router logits $z_t$ and
probabilities $p_t = \operatorname{softmax}(z_t)$ over $E$ experts, and over all rows the
assignments (the dispatch's: $k$ per token for a `topk`, one for a `max`); $f_i$ the share of
the assignments routed to expert $i$, $P_i = \frac1N\sum_t p_{ti}$. Also the responsibility
metrics of $p$ (`mass` $= P$, `entropy`, `effective_k`, `dead`, `dominance`, `scale`, `rows`,
`nonfinite`, `churn`), and `K` $= E$:

| field | type | meaning |
|---|---|---|
| `expert_load` | list of float | $f_i$, summing to 1 (also for top-$k$) |
| `expert_prob` | list of float | $P_i$, the mean router probability of each expert |
| `aux_balance` | float | $E\sum_i f_i P_i$: 1 when balanced, up to $E$ when collapsed (the Switch auxiliary loss without its coefficient) |
| `load_cv` | float | $\operatorname{std}_i f_i / \operatorname{mean}_i f_i$ |
| `max_load_ratio` | float | $\max_i f_i / \operatorname{mean}_i f_i$ |
| `dead_experts` | float | experts with no assignment in the step |
| `router_entropy_ratio` | float | $\exp(\bar H)/E$, $\bar H$ the mean per-token entropy of $p_t$: 1 uniform, $1/E$ one-hot |
| `router_z` | float | $\frac1N\sum_t \operatorname{LSE}(z_t)^2$ (the ST-MoE router z-loss without its coefficient) |
| `log_z` | float | $\frac1N\sum_t \operatorname{LSE}(z_t)$ |
| `log_z_max` | float | $\max_t \operatorname{LSE}(z_t)$ |
| `residual` | float | gradient: $\max\lvert\nabla_z - p\odot(\nabla_p - \langle p,\nabla_p\rangle)\rvert / \max\lvert\nabla_z\rvert$, the softmax Jacobian identity between the gradients of the logits and of the probabilities |
| `top_k` | int | assignments per token ($k$ of the `topk` dispatch, 1 for `max`) |

**Alarm records**

| field | type | meaning |
|---|---|---|
| `kind` | str | `"alarm"` |
| `step` | int | the step of the site record that raised it |
| `site` | str | the site's name |
| `alarm` | str | the rule that fired (`implicit_em.trace.alarms`): `"dominance"`, `"effective_k"`, `"dead_components"`, `"shrinking_scale"` (responsibility sites with $K > 1$), `"attention_entropy_collapse"`, `"attention_logit_growth"`, `"attention_sink"` (attention), `"log_z_drift"` (classification, router), `"expert_overload"`, `"dead_experts"` (router) or `"nonfinite_gradient"` (any site) |
| `value` | float | the measured value (for a per-head rule, the worst head's, named in the message) |
| `threshold` | float | the threshold crossed (`Thresholds`; 0 for dead components, dead experts and non-finite gradients; a ratio times the site's first value for a relative rule) |
| `message` | str | a sentence naming the site, the alarm, value, threshold, where the default comes from, the step, the likely cause and the usual remedy; logged and issued as a `CollapseWarning` the first time per site and alarm |
"""

from __future__ import annotations

from typing import Any

from implicit_em.trace.capture import Site

__all__ = ["site_record"]

Record = dict[str, Any]
"""A site or alarm record: a flat dict with the fields listed above."""


def site_record(
    step: int, site: Site, values: dict[str, Any] | None, probe: bool, max_components: int
) -> Record:
    """The record of `site` at `step` from its metric `values` (None: unmeasured)."""
    kind = site.kind
    record: Record = {"kind": "site", "step": step, "site": site.name, "type": kind.type}
    optional = kind.gradient_metrics + (kind.probe_metrics if probe else ())
    if values is None:
        record.update(dict.fromkeys(kind.metrics + (kind.probe_metrics if probe else ())))
        record["missing"] = sorted(record.keys() - {"kind", "step", "site", "type"})
        record.update(exact=None, tolerance=None, reason=site.reason)
        return record
    has_gradient = kind.has_gradient(values)
    for m in kind.metrics + (kind.probe_metrics if probe else ()):
        record[m] = values.get(m)
    record.update(kind.extras(values, max_components))
    if not has_gradient:
        record.update(dict.fromkeys(kind.gradient_metrics))
    record["missing"] = sorted(m for m in optional if record[m] is None)
    residual, tolerance = record[kind.residual_metric], values.get("tolerance")
    record["tolerance"] = tolerance
    record["exact"] = None if residual is None or tolerance is None else residual <= tolerance
    return record

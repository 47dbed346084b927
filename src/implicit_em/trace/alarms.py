r"""Alarm rules, evaluated at `Tracer.step` on the measured step's own site records.

Each rule knows the regime of its site: a classification head is judged against the labels it
is trained on, a router against its fair share over a window of measured steps, a mixture
against its $K$ components. Each rule names what it watches, its window, its threshold and
where the default comes from; each alarm message names the likely cause and the usual remedy.
A rule whose source gives no number is relative to the site's own first measured value (kept
per site). No rule reads a record whose identity residual is out of tolerance (`exact`
False): its metrics were read from a gradient that is not its loss's alone. The one exception
is an attention site under dropout (`dropout` > 0), whose residuals cannot hold (the output
uses the dropped weights) while the statistics its rules read, of the scores $q\cdot k$, are
unchanged by dropout.

Windowed rules read the last `window` measured records of their site (16 by default: 80
training steps at `every=5`) and fire only once the window is full. The defaults marked
"benchmark" were set on seeds 0-2 of `benchmarks/trace_healthy.py` (healthy and failing runs
of GPT-2, Llama and Mixtral), amended on seeds 0-5 after seeds 3-5 raised alarms on healthy
runs, and confirmed on fresh seeds 6-8.

| alarm | site | window | fires when | default from |
|---|---|---|---|---|
| `dominance` | classification, mixture ($K > 1$) | the step | `dominance` > 0.9 | the collapse test of the mixture objective |
| `effective_k` | classification, mixture | the step | `effective_k` < 1.5 | idem |
| `dead_components` | mixture | the step | a component has $p_j$ < 0.01 / K | idem |
| `dead_components` | classification | `window` (benchmark: 16) | a class labels ≥ 10 of the window's rows and gets $\sum_t n_t p_{tj}$ < 0.01 × its label count $\sum_t n_t q_{tj}$ (a class absent from the labels is no failure) | idem, against the label share instead of $1/K$ |
| `shrinking_scale` | classification, mixture | the step | `scale` < 0.1 × the site's first `scale` | idem |
| `nonfinite_gradient` | any | the step | non-finite gradient entries | |
| `attention_entropy_collapse` | attention | the step | a head's entropy < 0.1 × its first value | Zhai et al. 2023 give no number: relative |
| `attention_logit_growth` | attention | the step | a head's `max_logit` > 100 | Kimi K2's QK-Clip cap τ = 100 (Dehghani et al. 2023, Wortsman et al. 2023) |
| `attention_sink` | attention | the step | off by default (`sink_share=None`); when set, a head's `sink_share` > `sink_share` and > 2 × its first value | sinks emerge in healthy training (Gu et al. 2025; StreamingLLM): a state, not a failure, so no alarm unless asked; Gu et al.'s ε = 0.3 is too low for short causal rows, which exceed it when uniform |
| `log_z_drift` | classification | the step | the mean target logit $\bar z_y$ fell > 2 nats below its first value, or the mean $\log Z$ rose > 2 nats above its first value while the mean cross-entropy $\log Z - \bar z_y$ is no lower than its first value | Wortsman et al. 2023 (output logit divergence: the logits become very negative; PaLM's z-loss holds $\log Z$ near 0) |
| `log_z_drift` | router | the step | `log_z` moved > 5 nats from the site's first value | ST-MoE's router z-loss gives no number: relative |
| `expert_overload` | router | `window` (benchmark: 16) | the busiest expert's window load share > 2 × the mean | GShard's expert capacity factor 2.0: tokens beyond it are dropped |
| `dead_experts` | router | `window` (benchmark: 16) | an expert's window load share < 0.01 × its fair share $1/E$: it receives almost no tokens | Switch Transformer, ST-MoE (router collapse); the share is this module's, set by the benchmark (a healthy expert starved to 0.023 × its fair share recovered) |

The classification `log_z_drift` reads the decomposition $\log Z_i = z_{i,y_i} + \ell_i$ (the
log-partition is the target logit plus the row's cross-entropy). A model that learns by growing
its correct logits raises $\log Z$ with $z_y$ while its loss $\ell$ falls: no failure. The
drift the z-loss exists for is the shift of a whole row of logits, which the softmax (and so
the loss) cannot see: it moves $z_y$ with $\log Z$. Down (Wortsman et al. 2023: "the logits
diverge and become very negative"), the target logit falls, which learning does not produce;
up, $\log Z$ grows with no gain in the loss, which learning does not produce either.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from implicit_em.trace.records import Record
from implicit_em.trace.thresholds import DEFAULT_THRESHOLDS, Thresholds

__all__ = ["DEFAULT_THRESHOLDS", "Alarms", "CollapseWarning", "Thresholds"]

logger = logging.getLogger("implicit_em.trace")


class CollapseWarning(UserWarning):
    """A training-health alarm (issued once per site and alarm; every alarm is also a record)."""


@dataclass(frozen=True)
class _Fired:
    """One rule that fired: its alarm name, the value, the threshold, what it means, where
    the default comes from, the likely cause and the usual remedy."""

    alarm: str
    value: float
    threshold: float
    text: str
    source: str
    cause: str
    fix: str


_COLLAPSE_SOURCE = "the collapse test of the mixture objective"
_COLLAPSE_CAUSE = (
    "components collapsing onto few (components started or pushed far from the data, a "
    "learning rate too high for the head)"
)
_COLLAPSE_FIX = (
    "a volume term (log|det W|) or a balance prior on the components, reseeding dead "
    "components, or a lower learning rate for the head"
)
_DEAD_CLASS_CAUSE = (
    "the head stopped predicting classes that its labels contain (a learning rate too high "
    "for the output layer, or the labels or their weights push them down)"
)
_DEAD_CLASS_FIX = (
    "warm-up or a lower learning rate for the output layer; check the labels and the class weights"
)
_ROUTER_CAUSE = (
    "router collapse: the balancing loss is missing, or too weak for the router's learning rate"
)
_BALANCE_FIX = (
    "the balancing loss (Switch, Mixtral: 0.01-0.02 · E·Σ f_i P_i) or a larger coefficient, "
    "a lower router learning rate, a router z-loss (ST-MoE: 1e-3), or bias balancing "
    "(auxiliary-loss-free, DeepSeek-V3)"
)
_RATE_CAUSE = "a learning rate too high, or too short a warm-up"


class _Window:
    """The last `size` vectors of one site and quantity, summed on demand."""

    def __init__(self, size: int) -> None:
        self.rows: deque[Sequence[float]] = deque(maxlen=size)

    def add(self, row: Sequence[float]) -> None:
        if self.rows and len(self.rows[0]) != len(row):
            self.rows.clear()
        self.rows.append(row)

    @property
    def full(self) -> bool:
        return len(self.rows) == self.rows.maxlen

    def sum(self) -> list[float]:
        return [math.fsum(column) for column in zip(*self.rows, strict=True)]


class Alarms:
    """The alarm rules (see the module docstring), with each site's first measured values and
    windows; a warning and a log line the first time per site and alarm."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._first: dict[tuple[str, str], Any] = {}
        self._windows: dict[tuple[str, str], _Window] = {}
        self._warned: set[tuple[str, str]] = set()
        self._rules: dict[str, tuple[Callable[[Record], list[_Fired]], ...]] = {
            "classification": (self._collapse, self._dead_classes, self._target_logit),
            "mixture": (self._collapse, self._dead_components),
            "attention": (self._attention,),
            "router": (self._router, self._log_z),
        }

    def __call__(self, record: Record) -> list[Record]:
        """The alarm records of one site record (none when it is not `exact`, unless attention
        dropout explains it: the attention rules read statistics of the scores, which
        dropout leaves unchanged)."""
        inexact = record.get("exact") is False and not record.get("dropout")
        if inexact or record.get("reason") is not None:
            return []
        fired = self._nonfinite(record)
        for rule in self._rules.get(record["type"], ()):
            fired += rule(record)
        return [self._alarm(record, f) for f in fired]

    def _first_value(self, site: str, metric: str, value: Any) -> Any:
        """The site's first measured value of `metric` (kept from this call on)."""
        return self._first.setdefault((site, metric), value)

    def _window(self, site: str, metric: str) -> _Window:
        """The window of the site's last measured values of `metric`."""
        key = (site, metric)
        if key not in self._windows:
            self._windows[key] = _Window(self.thresholds.window)
        return self._windows[key]

    def _alarm(self, record: Record, f: _Fired) -> Record:
        site = record["site"]
        message = (
            f"{site}: {f.text} ({f.alarm}={f.value:.4g}, threshold {f.threshold:.4g}; "
            f"{f.source}) at step {record['step']}. Likely cause: {f.cause}. "
            f"Usual remedy: {f.fix}"
        )
        if (site, f.alarm) not in self._warned:
            self._warned.add((site, f.alarm))
            logger.warning(message)
            warnings.warn(message, CollapseWarning, stacklevel=5)
        return {
            "kind": "alarm",
            "step": record["step"],
            "site": site,
            "alarm": f.alarm,
            "value": f.value,
            "threshold": f.threshold,
            "message": message,
        }

    # -- rules -------------------------------------------------------------------------------

    def _nonfinite(self, record: Record) -> list[_Fired]:
        if not record.get("nonfinite"):
            return []
        return [
            _Fired(
                "nonfinite_gradient",
                record["nonfinite"],
                0.0,
                "non-finite gradient entries excluded from the metrics",
                "any non-finite gradient",
                "an overflow: " + _RATE_CAUSE + ", or half precision without loss scaling",
                "warm-up or a lower learning rate, gradient clipping, loss scaling",
            )
        ]

    def _collapse(self, record: Record) -> list[_Fired]:
        """Collapse of a responsibility site with K > 1: one component takes the mass."""
        t, site = self.thresholds, record["site"]
        if record.get("K", 0) <= 1 or not record["rows"]:
            return []
        out = []
        if record["dominance"] > t.dominance:
            text = "one component holds most of the mass"
            out.append(("dominance", record["dominance"], t.dominance, text))
        if record["effective_k"] < t.effective_k:
            text = "effective number of components collapsed"
            out.append(("effective_k", record["effective_k"], t.effective_k, text))
        scale = record["scale"]
        first = self._first_value(site, "scale", scale)
        if math.isfinite(scale) and first > 0 and scale < t.scale_ratio * first:
            text = f"the distance scale is shrinking (first {first:.4g})"
            out.append(("shrinking_scale", scale, t.scale_ratio * first, text))
        return [_Fired(*o, _COLLAPSE_SOURCE, _COLLAPSE_CAUSE, _COLLAPSE_FIX) for o in out]

    def _dead_components(self, record: Record) -> list[_Fired]:
        """Mixture components with (almost) no responsibility in the step."""
        if record.get("K", 0) <= 1 or not record["rows"] or record["dead"] <= 0:
            return []
        return [
            _Fired(
                "dead_components",
                record["dead"],
                0.0,
                "components with (almost) no responsibility",
                f"{_COLLAPSE_SOURCE}: p_j < {self.thresholds.dead_fraction:g} / K",
                _COLLAPSE_CAUSE,
                _COLLAPSE_FIX,
            )
        ]

    def _dead_classes(self, record: Record) -> list[_Fired]:
        """Classes that label rows of the window but get almost no responsibility there."""
        t, site = self.thresholds, record["site"]
        mass, share, rows = record.get("mass"), record.get("label_share"), record["rows"]
        if mass is None or share is None or not rows:
            return []
        masses, labels = self._window(site, "mass"), self._window(site, "label_share")
        masses.add([rows * p for p in mass])
        labels.add([rows * q for q in share])
        if not masses.full:
            return []
        dead = [
            j
            for j, (m, n) in enumerate(zip(masses.sum(), labels.sum(), strict=True))
            if n >= t.dead_label_rows and m < t.dead_fraction * n
        ]
        if not dead:
            return []
        return [
            _Fired(
                "dead_components",
                float(len(dead)),
                0.0,
                f"classes {dead[:8]} label rows of the last {t.window} measured steps but get "
                f"less than {t.dead_fraction:g} × their label share of the responsibility",
                f"{_COLLAPSE_SOURCE}, against each class's label share (a class absent from "
                "the labels is no failure)",
                _DEAD_CLASS_CAUSE,
                _DEAD_CLASS_FIX,
            )
        ]

    def _target_logit(self, record: Record) -> list[_Fired]:
        """Output logit divergence at a classification head (see the module docstring): the
        mean target logit falls far below its first value, or the mean log Z rises far above
        its first value with no gain in the loss."""
        target, log_z = record.get("label_logit"), record.get("log_z")
        if target is None or log_z is None or not math.isfinite(target + log_z):
            return []
        site, drift = record["site"], self.thresholds.head_log_z_drift
        first_target = self._first_value(site, "label_logit", target)
        first_log_z = self._first_value(site, "log_z", log_z)
        loss, first_loss = log_z - target, first_log_z - first_target
        if target < first_target - drift:
            value, threshold = target, first_target - drift
            text = (
                f"the logits are sliding down together: the mean target logit fell from "
                f"{first_target:.4g} (log Z now {log_z:.4g}), a shift the loss cannot see"
            )
        elif log_z > first_log_z + drift and loss >= first_loss:
            value, threshold = log_z, first_log_z + drift
            text = (
                f"the log-partition grew from {first_log_z:.4g} with no gain in the loss "
                f"(mean cross-entropy {loss:.4g}, first {first_loss:.4g})"
            )
        else:
            return []
        return [
            _Fired(
                "log_z_drift",
                value,
                threshold,
                text,
                "Wortsman et al. 2023's output logit divergence, which PaLM's z-loss prevents; "
                f"{drift:g} nats from the first value",
                "output logit divergence: the output layer's learning rate is too high for "
                "a head without z-loss",
                "a z-loss (PaLM, Wortsman et al. 2023: 1e-4 · log²Z), a lower learning rate or "
                "weight decay for the output layer",
            )
        ]

    def _log_z(self, record: Record) -> list[_Fired]:
        """Logit drift at a router: mean log Z far from its first value."""
        log_z = record.get("log_z")
        if log_z is None or not math.isfinite(log_z):
            return []
        first = self._first_value(record["site"], "log_z", log_z)
        drift = self.thresholds.log_z_drift
        if abs(log_z - first) <= drift:
            return []
        return [
            _Fired(
                "log_z_drift",
                log_z,
                first + math.copysign(drift, log_z - first),
                f"the mean log Z of the router logits drifted from its first value {first:.4g}",
                f"ST-MoE's router z-loss, which gives no number: {drift:g} nats from the "
                "first value",
                "router logits growing without bound (no router z-loss, or a router learning "
                "rate too high)",
                "a router z-loss (ST-MoE: 1e-3 · log²Z), a lower router learning rate",
            )
        ]

    def _attention(self, record: Record) -> list[_Fired]:
        """Attention entropy collapse (per head, relative to the head's first entropy)."""
        t, site = self.thresholds, record["site"]
        out = []
        entropy = record.get("head_entropy")
        if entropy:
            first = self._first_value(site, "head_entropy", entropy)
            ratios = [e / f if f > 0 else math.inf for e, f in zip(entropy, first, strict=True)]
            head = min(range(len(ratios)), key=ratios.__getitem__)
            if ratios[head] < t.entropy_ratio:
                out.append(
                    _Fired(
                        "attention_entropy_collapse",
                        entropy[head],
                        t.entropy_ratio * first[head],
                        f"head {head}'s attention entropy collapsed (first {first[head]:.4g})",
                        f"Zhai et al. 2023, who give no number: {t.entropy_ratio:g} × the "
                        "head's first entropy",
                        "attention logits growing until the softmax is one-hot: " + _RATE_CAUSE,
                        "warm-up or a lower learning rate; QK-norm (qk-layernorm) or σReparam",
                    )
                )
        logits = record.get("max_logit")
        if logits and max(logits) > t.max_logit:
            head = max(range(len(logits)), key=logits.__getitem__)
            out.append(
                _Fired(
                    "attention_logit_growth",
                    logits[head],
                    t.max_logit,
                    f"head {head}'s largest scaled q·k is growing",
                    "Kimi K2's QK-Clip cap τ = 100 (Dehghani et al. 2023; Wortsman et al. 2023)",
                    "query and key norms growing (attention logit growth): " + _RATE_CAUSE,
                    "QK-norm (qk-layernorm) or QK-Clip; warm-up or a lower learning rate",
                )
            )
        sink = (record.get("sink_share") or []) if t.sink_share is not None else []
        first = self._first_value(site, "sink_share", sink) if sink else []
        over = [h for h in range(len(sink)) if sink[h] > max(t.sink_share, 2 * first[h])]
        if over:
            head = max(over, key=sink.__getitem__)
            out.append(
                _Fired(
                    "attention_sink",
                    sink[head],
                    t.sink_share,
                    f"head {head} puts most of its attention on position 0 (first "
                    f"{first[head]:.4g})",
                    f"Gu et al. 2025's ε = 0.3 (StreamingLLM), set here to {t.sink_share:g}, "
                    "once the share has also doubled from the head's first value; common in "
                    "healthy trained models",
                    "a head with nothing to attend to parks its weight on the first token "
                    "(often benign)",
                    "where it hurts, gated attention or a softmax with an escape (a learnable "
                    "sink or +1 in the denominator)",
                )
            )
        return out

    def _router(self, record: Record) -> list[_Fired]:
        """Router imbalance over the window: an overloaded expert, experts (almost) without
        tokens."""
        t = self.thresholds
        load = record.get("expert_load")
        if not load:
            return []
        window = self._window(record["site"], "expert_load")
        window.add(load)
        if not window.full:
            return []
        share = [f / len(window.rows) for f in window.sum()]
        experts = len(share)
        out = []
        ratio = max(share) * experts
        if ratio > t.load_ratio:
            out.append(
                _Fired(
                    "expert_overload",
                    ratio,
                    t.load_ratio,
                    f"the busiest expert received {ratio:.3g} × the mean load over the last "
                    f"{t.window} measured steps",
                    "GShard's capacity factor 2.0 (tokens beyond capacity are dropped)",
                    _ROUTER_CAUSE,
                    _BALANCE_FIX,
                )
            )
        fair = 1.0 / experts
        dead = [i for i, f in enumerate(share) if f < t.expert_share * fair]
        if dead:
            out.append(
                _Fired(
                    "dead_experts",
                    float(len(dead)),
                    0.0,
                    f"experts {dead} received less than {t.expert_share:g} × their fair share "
                    f"1/{experts} of the tokens over the last {t.window} measured steps",
                    "Switch Transformer and ST-MoE (router collapse)",
                    _ROUTER_CAUSE,
                    _BALANCE_FIX,
                )
            )
        return out

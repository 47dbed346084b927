r"""Alarm rules, evaluated at `Tracer.step` on the measured step's own site records.

Each rule reads one site record and names what it watches, the threshold, where the default
comes from and the usual fix. A rule whose source gives no number is relative to the site's
own first measured value (kept per site). No rule reads a record whose identity residual is
out of tolerance (`exact` False): its metrics were read from a gradient that is not its
loss's alone.

| alarm | site | fires when | default from |
|---|---|---|---|
| `dominance` | classification, mixture ($K > 1$) | `dominance` > 0.9 | the collapse test of the mixture objective |
| `effective_k` | classification, mixture | `effective_k` < 1.5 | idem |
| `dead_components` | classification, mixture | a component has $p_j$ < 0.01 / K | idem |
| `shrinking_scale` | classification, mixture | `scale` < 0.1 × the site's first `scale` | idem |
| `nonfinite_gradient` | any | non-finite gradient entries | |
| `attention_entropy_collapse` | attention | a head's entropy < 0.1 × its first value | Zhai et al. 2023 give no number: relative |
| `attention_logit_growth` | attention | a head's `max_logit` > 100 | Kimi K2's QK-Clip cap τ = 100 (Dehghani et al. 2023, Wortsman et al. 2023) |
| `attention_sink` | attention | a head's `sink_share` > 0.3 and > 2 × its first value | Gu et al. 2025's ε = 0.3 (StreamingLLM); relative as well, since short causal rows exceed 0.3 when uniform |
| `log_z_drift` | classification, router | `log_z` moved > 10 nats from the site's first value | PaLM's z-loss gives no number: relative |
| `expert_overload` | router | `max_load_ratio` > 2 | GShard's expert capacity factor 2.0: tokens beyond it are dropped |
| `dead_experts` | router | an expert receives no token in the step | Switch Transformer, ST-MoE (router collapse) |
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from implicit_em.trace.sinks import Record

__all__ = ["DEFAULT_THRESHOLDS", "Alarms", "CollapseWarning", "Thresholds"]

logger = logging.getLogger("implicit_em.trace")


class CollapseWarning(UserWarning):
    """A training-health alarm (issued once per site and alarm; every alarm is also a record)."""


@dataclass(frozen=True)
class Thresholds:
    r"""The thresholds of the alarm rules.

    Parameters
    ----------
    dominance : float, default=0.9
        Alarm when one component holds more than this share of the mass (`dominance`).
    effective_k : float, default=1.5
        Alarm when $\exp H(\bar r)$ (`effective_k`) falls below this.
    dead_fraction : float, default=0.01
        A component is dead when its mass is below `dead_fraction / K`; any dead component
        raises an alarm.
    scale_ratio : float, default=0.1
        Alarm when the distance scale falls below this fraction of its first value.
    entropy_ratio : float, default=0.1
        Alarm when an attention head's entropy falls below this fraction of its first value
        (attention entropy collapse; its source gives no absolute number).
    max_logit : float, default=100.0
        Alarm when an attention head's largest scaled score $q\cdot k/\sqrt{d}$ exceeds
        this (Kimi K2's QK-Clip threshold).
    sink_share : float, default=0.3
        Alarm when an attention head puts more than this mean weight on key position 0
        (Gu et al.'s attention-sink threshold), and more than twice its first value.
    log_z_drift : float, default=10.0
        Alarm when the mean $\log Z$ of a classification head or router moves this many nats
        away from the site's first value (its source gives no absolute number).
    load_ratio : float, default=2.0
        Alarm when a router's busiest expert receives more than this multiple of the mean
        load (`max_load_ratio`; GShard's capacity factor).
    """

    dominance: float = 0.9
    effective_k: float = 1.5
    dead_fraction: float = 0.01
    scale_ratio: float = 0.1
    entropy_ratio: float = 0.1
    max_logit: float = 100.0
    sink_share: float = 0.3
    log_z_drift: float = 10.0
    load_ratio: float = 2.0


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class _Fired:
    """One rule that fired: its alarm name, the value, the threshold, what it means, where
    the default comes from and the usual fix."""

    alarm: str
    value: float
    threshold: float
    text: str
    source: str
    fix: str


_COLLAPSE_FIX = "a volume term (log|det W|) or a balance prior on the components"
_COLLAPSE_SOURCE = "the collapse test of the mixture objective"
_BALANCE_FIX = (
    "an auxiliary balance loss (Switch: 0.01 · N·Σ f_i P_i) or bias balancing "
    "(auxiliary-loss-free, DeepSeek-V3), a router z-loss"
)


class Alarms:
    """The alarm rules (see the module docstring), with each site's first measured values;
    a warning and a log line the first time per site and alarm."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._first: dict[tuple[str, str], Any] = {}
        self._warned: set[tuple[str, str]] = set()
        self._rules: dict[str, tuple[Callable[[Record], list[_Fired]], ...]] = {
            "classification": (self._collapse, self._log_z),
            "mixture": (self._collapse,),
            "attention": (self._attention,),
            "router": (self._router, self._log_z),
        }

    def __call__(self, record: Record) -> list[Record]:
        """The alarm records of one site record (none when it is not `exact`)."""
        if record.get("exact") is False or record.get("reason") is not None:
            return []
        fired = self._nonfinite(record)
        for rule in self._rules.get(record["type"], ()):
            fired += rule(record)
        return [self._alarm(record, f) for f in fired]

    def _first_value(self, site: str, metric: str, value: Any) -> Any:
        """The site's first measured value of `metric` (kept from this call on)."""
        return self._first.setdefault((site, metric), value)

    def _alarm(self, record: Record, f: _Fired) -> Record:
        site = record["site"]
        message = (
            f"{site}: {f.text} ({f.alarm}={f.value:.4g}, threshold {f.threshold:.4g}; "
            f"default from {f.source}) at step {record['step']}; usual fix: {f.fix}"
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
                "a lower learning rate, gradient clipping or loss scaling",
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
        if record["dead"] > 0:
            text = "components with (almost) no responsibility"
            out.append(("dead_components", record["dead"], 0.0, text))
        scale = record["scale"]
        first = self._first_value(site, "scale", scale)
        if math.isfinite(scale) and first > 0 and scale < t.scale_ratio * first:
            text = f"the distance scale is shrinking (first {first:.4g})"
            out.append(("shrinking_scale", scale, t.scale_ratio * first, text))
        return [_Fired(*o, _COLLAPSE_SOURCE, _COLLAPSE_FIX) for o in out]

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
                        "σReparam or qk-layernorm, or a lower learning rate / longer warm-up",
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
                    "qk-layernorm or QK-Clip, or a lower learning rate",
                )
            )
        sink = record.get("sink_share") or []
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
                    "Gu et al. 2025's ε = 0.3 (StreamingLLM), once the share has also doubled "
                    "from the head's first value (short causal rows put 0.3 on position 0 "
                    "even when uniform); common in trained models",
                    "often benign; where it hurts, gated attention or a softmax with an "
                    "escape (a learnable sink or +1 in the denominator)",
                )
            )
        return out

    def _log_z(self, record: Record) -> list[_Fired]:
        """Logit drift at a classification head or router: mean log Z far from its first value."""
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
                f"the mean log Z of the logits drifted from its first value {first:.4g}",
                f"PaLM's z-loss, which gives no number: {drift:g} nats from the first value",
                "a z-loss (PaLM: 1e-4 · log²Z; ST-MoE's router z-loss 1e-3), or a lower "
                "learning rate",
            )
        ]

    def _router(self, record: Record) -> list[_Fired]:
        """Router imbalance and collapse: an overloaded expert, experts without tokens."""
        t = self.thresholds
        out = []
        if record["max_load_ratio"] > t.load_ratio:
            out.append(
                _Fired(
                    "expert_overload",
                    record["max_load_ratio"],
                    t.load_ratio,
                    "the busiest expert receives far more than the mean load",
                    "GShard's capacity factor 2.0 (tokens beyond capacity are dropped)",
                    _BALANCE_FIX,
                )
            )
        if record["dead_experts"] > 0:
            out.append(
                _Fired(
                    "dead_experts",
                    record["dead_experts"],
                    0.0,
                    "experts received no token in this step",
                    "Switch Transformer and ST-MoE (router collapse)",
                    _BALANCE_FIX,
                )
            )
        return out

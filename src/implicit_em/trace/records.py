r"""Records of measured sites, and the collapse alarms raised from them.

A site record is a flat dict: ``kind="site"``, ``step``, ``site``, ``type`` and the metrics of
the site's kind (:mod:`implicit_em.trace.sites`); a metric that could not be measured is None
and listed in ``missing`` (gradient metrics when the backward pass did not reach the site,
probe metrics on the first measurement or when the probe did not reach it). A site present in
a measured step that its kind cannot measure has every metric None and a ``reason``.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any

from implicit_em.trace.capture import Site
from implicit_em.trace.sinks import Record

__all__ = ["DEFAULT_THRESHOLDS", "Alarms", "CollapseWarning", "Thresholds", "site_record"]

logger = logging.getLogger("implicit_em.trace")


class CollapseWarning(UserWarning):
    """A collapse alarm (issued once per site and alarm; every alarm is also a record)."""


@dataclass(frozen=True)
class Thresholds:
    """Collapse alarms of responsibility sites with K > 1.

    Attributes:
        dominance: alarm when one component holds more than this share of the mass.
        effective_k: alarm when :math:`\\exp H(\\bar r)` falls below this.
        dead_fraction: a component is dead when its mass is below ``dead_fraction / K``;
            any dead component raises an alarm.
        scale_ratio: alarm when the distance scale falls below this fraction of its first value.
    """

    dominance: float = 0.9
    effective_k: float = 1.5
    dead_fraction: float = 0.01
    scale_ratio: float = 0.1


DEFAULT_THRESHOLDS = Thresholds()


def site_record(
    step: int, site: Site, values: dict[str, Any] | None, probe: bool, max_components: int
) -> Record:
    """The record of ``site`` at ``step`` from its metric ``values`` (None: unmeasured)."""
    kind = site.kind
    record: Record = {"kind": "site", "step": step, "site": site.name, "type": kind.type}
    optional = kind.gradient_metrics + (kind.probe_metrics if probe else ())
    if values is None:
        record.update(dict.fromkeys(kind.metrics + (kind.probe_metrics if probe else ())))
        record["missing"] = sorted(record.keys() - {"kind", "step", "site", "type"})
        record["reason"] = site.reason
        return record
    has_gradient = kind.has_gradient(values)
    for m in kind.metrics + (kind.probe_metrics if probe else ()):
        record[m] = values.get(m)
    record.update(kind.extras(values, max_components))
    if not has_gradient:
        record.update(dict.fromkeys(kind.gradient_metrics))
    record["missing"] = sorted(m for m in optional if record[m] is None)
    return record


class Alarms:
    """Raises the collapse alarms of each record (a warning the first time per site and alarm)."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._first_scale: dict[str, float] = {}
        self._warned: set[tuple[str, str]] = set()

    def __call__(self, record: Record) -> list[Record]:
        site, t = record["site"], self.thresholds
        checks: list[tuple[str, float, float, bool, str]] = []
        if record.get("nonfinite"):
            text = "non-finite gradient entries excluded from the metrics"
            checks.append(("nonfinite_gradient", record["nonfinite"], 0.0, True, text))
        if record["type"] != "attention" and record.get("K", 0) > 1 and record["rows"]:
            dominance, effective_k = record["dominance"], record["effective_k"]
            checks += [
                (
                    "dominance",
                    dominance,
                    t.dominance,
                    dominance > t.dominance,
                    "one component holds most of the mass",
                ),
                (
                    "effective_k",
                    effective_k,
                    t.effective_k,
                    effective_k < t.effective_k,
                    "effective number of components collapsed",
                ),
                (
                    "dead_components",
                    record["dead"],
                    0.0,
                    record["dead"] > 0,
                    "components with (almost) no responsibility",
                ),
            ]
            scale = record["scale"]
            first = self._first_scale.setdefault(site, scale)
            if math.isfinite(scale) and first > 0:
                low = t.scale_ratio * first
                text = "the distance scale is shrinking"
                checks.append(("shrinking_scale", scale, low, scale < low, text))
        alarms = []
        for name, value, threshold, fired, text in checks:
            if not fired:
                continue
            message = (
                f"{site}: {text} ({name}={value:.4g}, threshold {threshold:.4g}) "
                f"at step {record['step']}"
            )
            alarms.append(
                {
                    "kind": "alarm",
                    "step": record["step"],
                    "site": site,
                    "alarm": name,
                    "value": value,
                    "threshold": threshold,
                    "message": message,
                }
            )
            if (site, name) not in self._warned:
                self._warned.add((site, name))
                logger.warning(message)
                warnings.warn(message, CollapseWarning, stacklevel=5)
        return alarms

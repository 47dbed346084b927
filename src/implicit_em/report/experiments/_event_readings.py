r"""E20's readings: from the runs' readings (`_event_training.run_reading`) to the numbers its
rule reads, for the tracer and for the practitioner's two monitors alike.

A *detector* is the tracer (its first alarm of any kind, at any site), the forward-softmax
monitor (`_forward_monitors`), the loss-spike monitor or the gradient-norm spike monitor; each
gives per run the first step it fired, or none.

* Detection: over the runs with an event (ground truth), 1 when the detector fired at any step
  of the run, else 0.
* False alarm: over the runs without an event, 1 when the detector fired, else 0.
* Lead before onset: over the event runs a detector caught, the event's onset minus the
  detector's first step (positive: it fired before the event began).
* Lead over a monitor: over the event runs, the monitor's first step minus the tracer's, each
  read as the run's length when it never fired (positive: the tracer fired first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "DETECTORS",
    "MONITORS",
    "by_alarm",
    "detections",
    "false_alarms",
    "fired",
    "lead_before_onset",
    "lead_over",
    "share",
]

Run = Mapping[str, Any]

DETECTORS = {
    "tracer": "tracer (first alarm)",
    "forward": "forward-softmax monitor",
    "loss_spike": "loss spike",
    "grad_spike": "gradient-norm spike",
}
"""Each detector's key in a run's reading, and its name on the page."""
MONITORS = ("forward", "loss_spike", "grad_spike")
"""The practitioner's monitors among the detectors."""


def fired(runs: Sequence[Run], detector: str) -> list[float]:
    """Per run, 1.0 when `detector` fired at some step, else 0.0."""
    return [float(r[detector] is not None) for r in runs]


def detections(runs: Sequence[Run], detector: str) -> list[float]:
    """`fired` over the runs with an event."""
    return fired([r for r in runs if r["event"]], detector)


def false_alarms(runs: Sequence[Run], detector: str) -> list[float]:
    """`fired` over the runs without an event."""
    return fired([r for r in runs if not r["event"]], detector)


def lead_before_onset(runs: Sequence[Run], detector: str) -> list[float]:
    """Onset minus `detector`'s first step, over the event runs it caught."""
    return [float(r["onset"] - r[detector]) for r in runs if r["event"] and r[detector] is not None]


def _first(run: Run, detector: str) -> float:
    step = run[detector]
    return float(run["steps"]) if step is None else float(step)


def lead_over(runs: Sequence[Run], monitor: str) -> list[float]:
    """Over the event runs, `monitor`'s first step minus the tracer's (a detector that never
    fired read at the run's length)."""
    return [_first(r, monitor) - _first(r, "tracer") for r in runs if r["event"]]


def by_alarm(runs: Sequence[Run]) -> dict[str, list[dict[str, Any]]]:
    """Each tracer alarm that fired in some run as a detector of its own: per alarm, the runs
    with `"tracer"` replaced by that alarm's first step (None where it did not fire)."""
    alarms = sorted({a for r in runs for a in r["alarm_steps"]})
    return {a: [{**r, "tracer": r["alarm_steps"].get(a)} for r in runs] for a in alarms}


def share(values: Sequence[float]) -> float:
    """The mean of 0/1 values; NaN for none."""
    return math.fsum(values) / len(values) if values else math.nan

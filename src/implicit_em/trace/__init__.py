"""Trace implicit EM during training: responsibilities read from gradients at named sites.

See `Tracer` and `docs/trace.md`.
"""

from __future__ import annotations

from implicit_em.trace.alarms import CollapseWarning, Thresholds
from implicit_em.trace.integrations.wandb_sink import WandbSink
from implicit_em.trace.sinks import History, JSONLSink, MemorySink, TensorBoardSink, make_sink
from implicit_em.trace.sites import SEARCHED
from implicit_em.trace.tracer import NoSiteError, Tracer

__all__ = [
    "SEARCHED",
    "CollapseWarning",
    "History",
    "JSONLSink",
    "MemorySink",
    "NoSiteError",
    "TensorBoardSink",
    "Thresholds",
    "Tracer",
    "WandbSink",
    "make_sink",
]

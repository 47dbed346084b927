r"""The thresholds of the alarm rules (`implicit_em.trace.alarms`), with where each default
comes from: the rules' sources where they give a number, otherwise `benchmarks/trace_healthy.py`
(thresholds set on some seeds of healthy and failing runs of GPT-2, Llama and Mixtral, and
confirmed on fresh ones)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_THRESHOLDS", "Thresholds"]


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
        A mixture component is dead when its mass is below `dead_fraction / K`; a class of a
        classification head when, over the window, it labels at least `dead_label_rows` rows
        and its mass is below `dead_fraction` × its label share.
    dead_label_rows : int, default=10
        The rows a class must label over the window before it can be dead.
    scale_ratio : float, default=0.1
        Alarm when the distance scale falls below this fraction of its first value.
    entropy_ratio : float, default=0.1
        Alarm when an attention head's entropy falls below this fraction of its first value
        (attention entropy collapse; its source gives no absolute number).
    max_logit : float, default=100.0
        Alarm when an attention head's largest scaled score $q\cdot k/\sqrt{d}$ exceeds
        this (Kimi K2's QK-Clip threshold).
    sink_share : float or None, default=None
        When set, alarm when an attention head puts more than this mean weight on key
        position 0, and more than twice its first value. Off by default: attention sinks
        emerge in healthy training (Gu et al. 2025), so they are a state to look at (the
        `sink_share` metric), not a failure; healthy GPT-2 heads reached 0.62 in
        `benchmarks/trace_healthy.py`.
    head_log_z_drift : float, default=2.0
        Alarm when the mean target logit of a classification head falls this many nats below
        its first value, or its mean $\log Z$ rises this far with no gain in the loss (PaLM
        gives no number; set by the benchmark: no healthy or unstable-rate run came within
        0.25 nats, and an output layer at too high a rate rose 3.5-4 nats in its first step).
    log_z_drift : float, default=5.0
        Alarm when the mean $\log Z$ of a router moves this many nats from its first value
        (ST-MoE gives no number; set by the benchmark, where no healthy run came near).
    load_ratio : float, default=2.0
        Alarm when a router's busiest expert receives more than this multiple of the mean
        load over the window (GShard's capacity factor).
    expert_share : float, default=0.01
        An expert is dead when its load share over the window is below this fraction of its
        fair share $1/E$ (almost no tokens; a healthy run's expert was starved to 0.023 of
        its fair share and recovered, `benchmarks/trace_healthy.py`).
    window : int, default=16
        Measured steps read by the windowed rules (dead classes, dead experts, expert
        overload); they fire only once the window is full.
    """

    dominance: float = 0.9
    effective_k: float = 1.5
    dead_fraction: float = 0.01
    dead_label_rows: int = 10
    scale_ratio: float = 0.1
    entropy_ratio: float = 0.1
    max_logit: float = 100.0
    sink_share: float | None = None
    head_log_z_drift: float = 2.0
    log_z_drift: float = 5.0
    load_ratio: float = 2.0
    expert_share: float = 0.01
    window: int = 16


DEFAULT_THRESHOLDS = Thresholds()

r"""E20's training loop: real training with the tracer on, as a user runs it, beside the two
monitors a practitioner watches today, and the event's ground truth read afterwards.

The loop: forward and backward on step $t$'s batch, the total gradient norm
$\lVert\nabla_\theta L_t\rVert_2$, the optimizer step, `Tracer.step()` (default thresholds,
every `every` steps, a memory sink), then the run's own bookkeeping under `Tracer.paused()`.
A model in which the tracer finds no site (`NoSiteError` at its first measured step) goes on
training untraced, and the run records that the tracer saw nothing.

The practitioner's monitors are one spike detector applied to two series, the training loss
$L_t$ and the gradient norm $G_t$: with $m_t$ the median and
$\mathrm{MAD}_t = 1.4826\cdot\operatorname{median}|x_s - m_t|$ of the previous `window` values
$x_{t-w}, \dots, x_{t-1}$, the monitor fires at the first $t \ge w$ with
$x_t > m_t + k\,\mathrm{MAD}_t$ (a robust z-score above $k$; a non-finite value fires too).

An event's onset is read from the run's own per-step record, after the fact: a component
(expert, latent) that is dead at the end of training has its onset one step after it was last
active; the run's onset is the earliest of its dead components' onsets.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from implicit_em.trace import Tracer
from implicit_em.trace.tracer import NoSiteError

__all__ = [
    "MAD_SCALE",
    "RunLog",
    "first_spike",
    "onset_of",
    "quiet_tracer",
    "run_reading",
    "train_traced",
]

MAD_SCALE = 1.4826
"""The median absolute deviation of a normal sample times this estimates its standard deviation."""


@contextmanager
def quiet_tracer() -> Iterator[None]:
    """The tracer's `CollapseWarning`s and log lines silenced inside the block (every alarm is
    still a record in `Tracer.alarms`)."""
    log = logging.getLogger("implicit_em.trace")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def first_spike(values: Sequence[float], window: int, k: float) -> int | None:
    """The first step $t \\ge$ `window` at which `values[t]` exceeds the median of the previous
    `window` values by more than `k` scaled MADs (or is not finite); None when it never does."""
    x = np.asarray(values, dtype=np.float64)
    for t in range(window, len(x)):
        if not math.isfinite(x[t]):
            return t
        past = x[t - window : t]
        past = past[np.isfinite(past)]
        if past.size == 0:
            continue
        median = float(np.median(past))
        mad = MAD_SCALE * float(np.median(np.abs(past - median)))
        if x[t] > median + k * mad:
            return t
    return None


def onset_of(last_active: Sequence[int], dead: Sequence[bool]) -> int | None:
    """The run's onset: the earliest `last_active[j] + 1` over the components `j` that are
    `dead` at the end (`last_active` -1 for a component never active); None without one."""
    onsets = [a + 1 for a, d in zip(last_active, dead, strict=True) if d]
    return min(onsets) if onsets else None


@dataclass
class RunLog:
    """What one training run recorded: per step the loss and the gradient norm; the tracer's
    alarms (step, alarm, site), whether it found a site at all, the types of the sites it
    measured and, per type, the largest identity residual (responsibilities read from the
    gradient against the softmax of the logits)."""

    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    alarms: list[tuple[int, str, str]] = field(default_factory=list)
    traced: bool = True
    site_types: list[str] = field(default_factory=list)
    residuals: dict[str, float] = field(default_factory=dict)


def _grad_norm(params: Sequence[nn.Parameter]) -> float:
    grads = [p.grad.detach().reshape(-1) for p in params if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.cat(grads)).item()) if grads else 0.0


def train_traced(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    loss_of: Callable[[int], Tensor],
    steps: int,
    every: int,
    observe: Callable[[int], None],
    schedule: Any = None,
) -> RunLog:
    """Train `model` for `steps` steps of `loss_of(t)` (forward on step `t`'s batch) with the
    tracer on (default thresholds, every `every` steps), calling `observe(t)` after each step
    with the tracer paused; `schedule` (a learning-rate scheduler) steps after the optimizer.
    Without a traceable site the run goes on untraced (`RunLog.traced` False)."""
    log = RunLog()
    params = [p for p in model.parameters() if p.requires_grad]

    def one_step(t: int) -> None:
        loss = loss_of(t)
        loss.backward()
        log.losses.append(float(loss.item()))
        log.grad_norms.append(_grad_norm(params))
        opt.step()
        opt.zero_grad(set_to_none=True)
        if schedule is not None:
            schedule.step()

    t = 0
    with quiet_tracer():
        try:
            with Tracer(model, every=every, sinks=["memory"]) as tracer:
                while t < steps:
                    one_step(t)
                    tracer.step()
                    with tracer.paused():
                        observe(t)
                    t += 1
        except NoSiteError:
            log.traced = False
            observe(t)
            t += 1
        while t < steps:
            one_step(t)
            observe(t)
            t += 1
    log.alarms = [(int(a["step"]), str(a["alarm"]), str(a["site"])) for a in tracer.alarms]
    records = [r for r in tracer.history if r.get("kind") != "alarm"]
    log.site_types = sorted({str(r["type"]) for r in records if "type" in r})
    for r in records:
        if r.get("residual") is not None and math.isfinite(r["residual"]):
            kind = str(r["type"])
            log.residuals[kind] = max(log.residuals.get(kind, 0.0), float(r["residual"]))
    return log


def run_reading(
    log: RunLog,
    onset: int | None,
    steps: int,
    monitor: dict[str, Any],
    forward: int | None = None,
) -> dict[str, Any]:
    """One run's reading as plain JSON: whether the event happened and its onset; the first
    step of the tracer's first alarm (any alarm, any site), of the forward-softmax monitor
    (`forward`, computed by the run: `_forward_monitors`; None for a model without a softmax)
    and of each spike monitor (`monitor`: `window`, and `k_loss` and `k_grad` for the loss and
    the gradient norm);
    which alarms fired first, and each alarm's first step; the run's length."""
    window = int(monitor["window"])
    first_alarm = min((s for s, _, _ in log.alarms), default=None)
    return {
        "event": onset is not None,
        "onset": onset,
        "steps": steps,
        "traced": log.traced,
        "site_types": log.site_types,
        "tracer": first_alarm,
        "forward": forward,
        "tracer_alarms": sorted({a for s, a, _ in log.alarms if s == first_alarm}),
        "alarm_kinds": sorted({a for _, a, _ in log.alarms}),
        "alarm_steps": {a: min(s for s, b, _ in log.alarms if b == a) for _, a, _ in log.alarms},
        "loss_spike": first_spike(log.losses, window, float(monitor["k_loss"])),
        "grad_spike": first_spike(log.grad_norms, window, float(monitor["k_grad"])),
        "residuals": log.residuals,
        "final_loss": float(np.mean(log.losses[-max(1, window) :])),
    }

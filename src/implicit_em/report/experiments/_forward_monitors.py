r"""E20's forward-softmax monitors: what a practitioner reads from the forward pass alone, the
rival of the tracer's reading of responsibilities from the gradients.

Both read forward softmax statistics, one value per component (an expert, a head), at the steps
the tracer measures ($t \equiv 0 \bmod$ `every`), given as `(step, values)` readings in step
order:

* `first_starved` (routers): with $P_{t,i}$ the mean forward routing weight of expert $i$ over
  step $t$'s batch (the mean of $\operatorname{softmax}(z)_i$), the monitor fires at the first
  measured step at which the mean of $P_{\cdot,i}$ over the last `window` measured steps is below
  `cut` for some expert, once the window is full (the tracer's `dead_experts` rule, read from the
  forward weights instead of the dispatch counts);
* `first_drop` (attention): with $H_{t,h}$ the mean entropy of head $h$'s forward attention
  weights over step $t$'s batch, the monitor fires at the first measured step at which
  $H_{t,h} <$ `ratio` $\times H_{t_0,h}$ for some head, $t_0$ the first measured step (the
  tracer's `attention_entropy_collapse` rule, read from the forward weights).

Each returns the step at which it fired, or None.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Readings", "first_drop", "first_starved", "measured"]

Readings = Sequence[tuple[int, Sequence[float]]]
"""`(step, one value per component)` at the measured steps, in step order."""


def measured(values: Sequence[Sequence[float]], every: int) -> list[tuple[int, Sequence[float]]]:
    """The readings of a per-step series `values[t]` at the steps $t \\equiv 0 \\bmod$ `every`."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    return [(t, v) for t, v in enumerate(values) if t % every == 0]


def _arrays(readings: Readings) -> list[tuple[int, np.ndarray]]:
    return [(t, np.asarray(v, dtype=np.float64)) for t, v in readings]


def first_starved(readings: Readings, window: int, cut: float) -> int | None:
    """The first reading's step at which some component's mean over the last `window` readings
    is below `cut` (window full); None when none is."""
    arrays = _arrays(readings)
    for j in range(window - 1, len(arrays)):
        recent = np.stack([v for _, v in arrays[j - window + 1 : j + 1]])
        if float(recent.mean(0).min()) < cut:
            return arrays[j][0]
    return None


def first_drop(readings: Readings, ratio: float) -> int | None:
    """The first reading's step at which some component's value is below `ratio` times its value
    at the first reading; None when none is."""
    arrays = _arrays(readings)
    if not arrays:
        return None
    first = arrays[0][1]
    for t, v in arrays:
        if bool((v < ratio * first).any()):
            return t
    return None

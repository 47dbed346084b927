r"""Intervals over independent seeds: the statistics every criterion of the report is judged on.

* `mean_interval`: the mean of per-seed values with a two-sided interval, Student t
  ($\bar x \pm t_{1-\alpha/2,\,n-1}\, s/\sqrt n$) or bootstrap percentile (the
  $\alpha/2$ and $1-\alpha/2$ quantiles of the means of `resamples` resamples drawn
  with replacement, from a fixed seed);
* `share_interval`: a share of successes with its Wilson score interval or its exact
  Clopper–Pearson interval (beta quantiles);
* `seeds_to_decide`: roughly how many seeds would shrink an interval enough to clear a threshold,
  assuming its half-width falls as $1/\sqrt n$.

With fewer than two values a mean has no interval: it is $(-\infty, \infty)$.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy

__all__ = ["Interval", "mean_interval", "seeds_to_decide", "share_interval"]

MEAN_METHODS = ("t", "bootstrap")
SHARE_METHODS = ("wilson", "clopper-pearson")


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval (`level` 95% unless stated), its method and `n`."""

    estimate: float
    low: float
    high: float
    method: str
    n: int

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in (self.estimate, self.low, self.high))


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def mean_interval(
    values: Sequence[float],
    method: str = "t",
    level: float = 0.95,
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """The mean of `values` with its `level` interval by `method` ("t" or "bootstrap").

    A non-finite value makes the estimate and both ends NaN; fewer than two values give
    the interval $(-\\infty, \\infty)$.
    """
    if method not in MEAN_METHODS:
        raise ValueError(f"method must be one of {MEAN_METHODS}, got {method!r}")
    _check_level(level)
    x = np.asarray(values, dtype=float).ravel()
    n = int(x.size)
    if n == 0:
        raise ValueError("values must hold at least one number")
    if not np.all(np.isfinite(x)):
        return Interval(math.nan, math.nan, math.nan, method, n)
    estimate = float(x.mean())
    if n < 2:
        return Interval(estimate, -math.inf, math.inf, method, n)
    alpha = 1.0 - level
    if method == "t":
        half = float(_scipy.t.ppf(1.0 - alpha / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
        return Interval(estimate, estimate - half, estimate + half, method, n)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1.0 - alpha / 2])
    return Interval(estimate, float(min(low, estimate)), float(max(high, estimate)), method, n)


def share_interval(successes: int, n: int, method: str = "wilson", level: float = 0.95) -> Interval:
    """The share `successes / n` with its Wilson or Clopper–Pearson `level` interval."""
    if method not in SHARE_METHODS:
        raise ValueError(f"method must be one of {SHARE_METHODS}, got {method!r}")
    _check_level(level)
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    alpha = 1.0 - level
    p = successes / n
    if method == "wilson":
        z = float(_scipy.norm.ppf(1.0 - alpha / 2))
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return Interval(p, max(0.0, centre - half), min(1.0, centre + half), method, n)
    low = 0.0 if successes == 0 else float(_scipy.beta.ppf(alpha / 2, successes, n - successes + 1))
    high = (
        1.0
        if successes == n
        else float(_scipy.beta.ppf(1 - alpha / 2, successes + 1, n - successes))
    )
    return Interval(p, low, high, method, n)


def seeds_to_decide(interval: Interval, threshold: float) -> int | None:
    r"""Roughly how many seeds would put the whole interval on one side of `threshold`.

    The half-width on the threshold's side, $h$, is assumed to fall as
    $1/\sqrt n$ while the estimate stays put, so $n' = \lceil n\,(h/|\hat\theta -
    \tau|)^2 \rceil$. None when that cannot be said: the estimate sits on the threshold, or the
    interval is not finite (fewer than two seeds, or a NaN).
    """
    if not interval.finite or interval.n < 1:
        return None
    gap = abs(interval.estimate - threshold)
    if gap == 0.0:
        return None
    half = (
        interval.estimate - interval.low
        if interval.estimate > threshold
        else interval.high - interval.estimate
    )
    if half <= gap:
        return interval.n
    return math.ceil(interval.n * (half / gap) ** 2 - 1e-9)

r"""Intervals over independent seeds: the statistics every criterion of the report is judged on.

* `mean_interval`: the mean of per-seed values with a two-sided interval, Student t
  ($\bar x \pm t_{1-\alpha/2,\,n-1}\, s/\sqrt n$), bootstrap percentile (the
  $\alpha/2$ and $1-\alpha/2$ quantiles of the means of `resamples` resamples drawn
  with replacement, from a fixed seed) or bootstrap BCa (the percentile interval corrected for
  the bootstrap distribution's bias $z_0$ and for its skew by the jackknife acceleration $a$:
  the quantiles $\Phi(z_0 + (z_0 + z_q)/(1 - a(z_0 + z_q)))$ for $q = \alpha/2, 1-\alpha/2$).
  A bootstrap resamples the seeds it has: below `BOOTSTRAP_MIN_N` (10) values it cannot see
  the tails it claims to correct for, so it falls back to Student t and the interval's method
  says so (`t-for-bca`, `t-for-bootstrap`);
* `median_interval`: the median with its exact, distribution-free sign-test interval
  $[x_{(r)}, x_{(n+1-r)}]$, $r$ the largest rank with $2\,P(B \le r-1) \le \alpha$ for
  $B \sim \mathrm{Binomial}(n, 1/2)$; below 6 values no rank reaches 95% and it is
  $(-\infty, \infty)$;
* `share_interval`: a share of successes with its Wilson score interval or its exact
  Clopper–Pearson interval (beta quantiles);
* `seeds_to_decide`: roughly how many seeds would shrink an interval enough to clear a threshold,
  assuming its half-width falls as $1/\sqrt n$ (for the sign test: that the share of values on
  the threshold's wrong side stays);
* `modes`: per-seed values split into modes at every gap wider than a declared width, each
  mode with its count, mean and range.

With fewer than two values a mean has no interval: it is $(-\infty, \infty)$.

**Bounds.** A quantity with declared `bounds` $[l, u]$ (a share in $[0, 1]$, a KL $\ge 0$) has
its interval inside them: a value outside raises `ValueError` (beyond the degeneracy tolerance
below, so rounding at a bound is no error), and an end that runs past a bound is set on it
$([\max(\text{low}, l), \min(\text{high}, u)])$. Only Student t can run past (it is symmetric
about the mean); the bootstrap and order-statistic intervals lie within the values, and the
share intervals within $[0, 1]$.

**Unanimous outcomes.** A quantity bounded on both sides whose every seed sits at one bound (all
20 units gain every cluster: 1.0 on $[0, 1]$) is an outcome shared by every seed, not a constant
by construction: for $x \in [l, u]$, $\mathrm{E}\,x \ge l + (u - l)\,P(x = u)$, so the exact
Clopper–Pearson interval of $n$ seeds of $n$ at $u$ bounds the mean from below
($[l + (u - l)(\alpha/2)^{1/n},\, u]$; mirrored at $l$). Its method is `unanimous`.

**Degenerate.** An interval over values whose spread is rounding, not seeds, reads a constant:
it is `degenerate` when its values' range is at most
$\text{DEGENERATE\_RTOL} \cdot \max|x| + \text{DEGENERATE\_ATOL}$ ($10^{-6}$ relative, eight
float32 units in the last place, so a constant computed in float32 passes; $10^{-12}$ absolute,
for constants at zero). A share of unanimous outcomes is not degenerate: it is read by its
Wilson or Clopper–Pearson interval, which has a width at every $n$.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy

__all__ = [
    "BOOTSTRAP_MIN_N",
    "DEGENERATE_ATOL",
    "DEGENERATE_RTOL",
    "UNBOUNDED",
    "Bounds",
    "Interval",
    "Mode",
    "mean_interval",
    "median_interval",
    "modes",
    "seeds_to_decide",
    "share_interval",
    "sign_test_rank",
]

Bounds = tuple[float, float]
UNBOUNDED: Bounds = (-math.inf, math.inf)

DEGENERATE_RTOL = 1e-6
"""A spread of at most this share of the values' size (plus `DEGENERATE_ATOL`) is rounding."""
DEGENERATE_ATOL = 1e-12
"""The absolute floor of that tolerance, for constants at or near zero."""
BOOTSTRAP_MIN_N = 10
"""The fewest values a bootstrap interval is computed on; below, Student t."""

MEAN_METHODS = ("t", "bootstrap", "bca")
MEDIAN_METHODS = ("sign-test",)
SHARE_METHODS = ("wilson", "clopper-pearson")
METHOD_NAMES = {
    "t": "Student t",
    "bootstrap": "bootstrap percentile",
    "bca": "bootstrap BCa",
    "sign-test": "exact sign test (median)",
    "wilson": "Wilson score",
    "clopper-pearson": "exact Clopper–Pearson",
    "t-for-bootstrap": "Student t (bootstrap percentile needs n ≥ 10)",
    "t-for-bca": "Student t (bootstrap BCa needs n ≥ 10)",
    "unanimous": "exact Clopper–Pearson (every seed at its bound)",
}
"""Each interval method as the page names it."""


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval (`level` 95% unless stated), its method and `n`;
    `spread` is the range of the values it was read from (NaN for a share or a unanimous
    outcome, which are read from their count, so never degenerate)."""

    estimate: float
    low: float
    high: float
    method: str
    n: int
    spread: float = math.nan

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in (self.estimate, self.low, self.high))

    @property
    def degenerate(self) -> bool:
        r"""A finite interval over values whose range is within rounding of a constant,
        $\max x - \min x \le$ `DEGENERATE_RTOL` $\cdot \max|x|$ + `DEGENERATE_ATOL`: it reads
        a constant (every seed alike), not a spread over seeds."""
        scale = max(abs(self.estimate), abs(self.low), abs(self.high))
        return self.finite and self.spread <= DEGENERATE_RTOL * scale + DEGENERATE_ATOL


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _check_bounds(x: np.ndarray, bounds: Bounds) -> None:
    """`ValueError` when a value lies outside `bounds` by more than the degeneracy tolerance."""
    low, high = bounds
    if not low < high:
        raise ValueError(f"bounds must be (low, high) with low < high, got {bounds!r}")
    finite = x[np.isfinite(x)]
    if finite.size == 0:
        return
    slack = DEGENERATE_RTOL * float(np.max(np.abs(finite))) + DEGENERATE_ATOL
    outside = finite[(finite < low - slack) | (finite > high + slack)]
    if outside.size:
        raise ValueError(
            f"a value lies outside its bounds [{low:g}, {high:g}]: {float(outside[0])!r}"
        )


def _within(interval: Interval, bounds: Bounds) -> Interval:
    """`interval` with each end that runs past `bounds` set on it."""
    low = min(max(interval.low, bounds[0]), bounds[1])
    high = max(min(interval.high, bounds[1]), bounds[0])
    return Interval(interval.estimate, low, high, interval.method, interval.n, interval.spread)


def _unanimous(x: np.ndarray, bounds: Bounds, level: float) -> Interval | None:
    """The interval of a bounded mean whose every value sits at one of its two finite
    `bounds` (within the degeneracy tolerance): the Clopper–Pearson interval of the share of
    values at that bound, mapped onto the bounds; None otherwise."""
    low, high = bounds
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    slack = DEGENERATE_RTOL * max(abs(low), abs(high)) + DEGENERATE_ATOL
    n, width = int(x.size), high - low
    for bound, at_top in ((high, True), (low, False)):
        if np.all(np.abs(x - bound) <= slack):
            share = share_interval(n if at_top else 0, n, "clopper-pearson", level)
            return Interval(
                bound, low + width * share.low, low + width * share.high, "unanimous", n
            )
    return None


def mean_interval(
    values: Sequence[float],
    method: str = "t",
    level: float = 0.95,
    *,
    bounds: Bounds = UNBOUNDED,
    resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """The mean of `values` with its `level` interval by `method` ("t", "bootstrap" or "bca";
    the bootstrap ones draw `resamples` from the fixed `seed`, so they are deterministic, and
    below `BOOTSTRAP_MIN_N` values give Student t, as `t-for-<method>`), inside `bounds`;
    every value at one of two finite `bounds` gives the `unanimous` exact interval.

    A non-finite value makes the estimate and both ends NaN; fewer than two values give
    the interval $(-\\infty, \\infty)$; a value outside `bounds` raises `ValueError`.
    """
    if method not in MEAN_METHODS:
        raise ValueError(f"method must be one of {MEAN_METHODS}, got {method!r}")
    _check_level(level)
    x = np.asarray(values, dtype=float).ravel()
    n = int(x.size)
    if n == 0:
        raise ValueError("values must hold at least one number")
    _check_bounds(x, bounds)
    if not np.all(np.isfinite(x)):
        return Interval(math.nan, math.nan, math.nan, method, n)
    estimate, spread = float(x.mean()), float(x.max() - x.min())
    if n < 2:
        return Interval(estimate, -math.inf, math.inf, method, n, spread)
    unanimous = _unanimous(x, bounds, level)
    if unanimous is not None:
        return unanimous
    alpha = 1.0 - level
    if method != "t" and n < BOOTSTRAP_MIN_N:
        method = f"t-for-{method}"
    if method.startswith("t"):
        half = float(_scipy.t.ppf(1.0 - alpha / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
        interval = Interval(estimate, estimate - half, estimate + half, method, n, spread)
        return _within(interval, bounds)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    quantiles = np.array([alpha / 2, 1.0 - alpha / 2])
    if method == "bca":
        quantiles = _bca_quantiles(x, means, quantiles)
    low, high = np.quantile(means, quantiles)
    low, high = float(min(low, estimate)), float(max(high, estimate))
    return _within(Interval(estimate, low, high, method, n, spread), bounds)


def _bca_quantiles(x: np.ndarray, means: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    r"""The BCa-adjusted quantile levels: bias $z_0 = \Phi^{-1}(P^*(\bar x^* < \bar x))$,
    acceleration $a = \sum d^3 / (6 (\sum d^2)^{3/2})$ with $d$ the jackknife means' deviations
    from their mean (the plain percentile levels when the values are all equal)."""
    share_below = float(np.mean(means < x.mean())) + 0.5 * float(np.mean(means == x.mean()))
    z0 = float(_scipy.norm.ppf(min(max(share_below, 1e-12), 1.0 - 1e-12)))
    jackknife = (x.sum() - x) / (x.size - 1)
    d = jackknife.mean() - jackknife
    scale = float(np.max(np.abs(d)))
    if scale == 0.0:
        return quantiles
    d = d / scale  # `a` is scale-free; scaling keeps (Σ d²)^{3/2} from underflowing to 0
    a = float(np.sum(d**3)) / (6.0 * float(np.sum(d**2)) ** 1.5)
    z = _scipy.norm.ppf(quantiles)
    return _scipy.norm.cdf(z0 + (z0 + z) / (1.0 - a * (z0 + z)))


def sign_test_rank(n: int, level: float = 0.95) -> int:
    r"""The largest rank r with $2 P(B \le r-1) \le 1 - level$, $B \sim$ Binomial(n, 1/2):
    $[x_{(r)}, x_{(n+1-r)}]$ covers the median with probability at least `level`. 0 when no
    rank does (too few values)."""
    _check_level(level)
    alpha = 1.0 - level
    r = 0
    while r + 1 <= (n + 1) // 2 and 2.0 * float(_scipy.binom.cdf(r, n, 0.5)) <= alpha:
        r += 1
    return r


def median_interval(
    values: Sequence[float], level: float = 0.95, *, bounds: Bounds = UNBOUNDED
) -> Interval:
    """The median of `values` with its exact sign-test `level` interval (order statistics; no
    assumption on the distribution but independence). Infinite when `values` are too few for
    any rank to reach `level` (fewer than 6 at 95%); NaN with a non-finite value; a value
    outside `bounds` raises `ValueError` (the interval's ends are values, so inside them)."""
    x = np.sort(np.asarray(values, dtype=float).ravel())
    n = int(x.size)
    if n == 0:
        raise ValueError("values must hold at least one number")
    _check_bounds(x, bounds)
    if not np.all(np.isfinite(x)):
        return Interval(math.nan, math.nan, math.nan, "sign-test", n)
    median, spread = float(np.median(x)), float(x[-1] - x[0])
    r = sign_test_rank(n, level)
    if r == 0:
        return Interval(median, -math.inf, math.inf, "sign-test", n, spread)
    return Interval(median, float(x[r - 1]), float(x[n - r]), "sign-test", n, spread)


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


def seeds_to_decide(
    interval: Interval, threshold: float, values: Sequence[float] = ()
) -> int | None:
    r"""Roughly how many seeds would put the whole interval on one side of `threshold`.

    The half-width on the threshold's side, $h$, is assumed to fall as
    $1/\sqrt n$ while the estimate stays put, so $n' = \lceil n\,(h/|\hat\theta -
    \tau|)^2 \rceil$. None when that cannot be said: the estimate sits on the threshold, or the
    interval is not finite (fewer than two seeds, or a NaN). For the sign test, read from its
    `values`: the fewest seeds whose exact interval clears `threshold` if the share $q$ of
    values on the median's far side of it stays, i.e. $q\,n' <$ `sign_test_rank(n')`.
    """
    if interval.method == "sign-test":
        return _sign_test_seeds(interval, threshold, values)
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


def _sign_test_seeds(interval: Interval, threshold: float, values: Sequence[float]) -> int | None:
    x = np.asarray(values, dtype=float)
    if x.size == 0 or not np.all(np.isfinite(x)) or interval.estimate == threshold:
        return None
    far = x <= threshold if interval.estimate > threshold else x >= threshold
    share = float(np.mean(far))
    if share >= 0.5:
        return None
    return next((n for n in range(max(x.size, 1), 10_001) if share * n < sign_test_rank(n)), None)


@dataclass(frozen=True)
class Mode:
    """One mode of per-seed values: how many seeds fall in it, their mean and range."""

    count: int
    mean: float
    low: float
    high: float


def modes(values: Sequence[float], gap: float) -> list[Mode]:
    """`values` split into modes wherever two neighbours in sorted order lie more than `gap`
    apart (`gap` is declared with the quantity, from what separates its outcomes); one mode
    when no gap is that wide. Non-finite values are left out."""
    if gap <= 0:
        raise ValueError(f"gap must be positive, got {gap!r}")
    x = np.sort(np.asarray(values, dtype=float).ravel())
    x = x[np.isfinite(x)]
    if x.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(x) > gap) + 1
    return [
        Mode(int(part.size), float(part.mean()), float(part[0]), float(part[-1]))
        for part in np.split(x, cuts)
    ]

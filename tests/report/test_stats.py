"""The report's intervals against scipy.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from implicit_em.report.judging.stats import (
    Interval,
    mean_interval,
    median_interval,
    modes,
    seeds_to_decide,
    share_interval,
    sign_test_rank,
)

values = st.lists(
    st.floats(min_value=-1e3, max_value=1e3, allow_nan=False), min_size=2, max_size=30
)


@settings(max_examples=60, deadline=None)
@given(values)
def test_t_interval_matches_scipy(xs):
    got = mean_interval(xs, "t")
    mean, sem = np.mean(xs), stats.sem(xs)
    if sem == 0:
        assert got.low == got.high == pytest.approx(mean)
        return
    low, high = stats.t.interval(0.95, len(xs) - 1, loc=mean, scale=sem)
    assert (got.estimate, got.low, got.high) == pytest.approx((mean, low, high), abs=1e-9)
    assert got.n == len(xs) and got.method == "t"


def test_bootstrap_percentile_close_to_scipy():
    rng = np.random.default_rng(3)
    xs = rng.normal(1.0, 2.0, size=25)
    got = mean_interval(xs, "bootstrap", resamples=20_000)
    ref = stats.bootstrap(
        (xs,), np.mean, method="percentile", n_resamples=20_000, random_state=0
    ).confidence_interval
    width = ref.high - ref.low
    assert got.low == pytest.approx(ref.low, abs=0.05 * width)
    assert got.high == pytest.approx(ref.high, abs=0.05 * width)
    assert mean_interval(xs, "bootstrap") == mean_interval(xs, "bootstrap")  # fixed seed


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_share_intervals_match_scipy(pair):
    k, n = pair
    result = stats.binomtest(k, n)
    for method, scipy_method in (("wilson", "wilson"), ("clopper-pearson", "exact")):
        got = share_interval(k, n, method)
        ref = result.proportion_ci(0.95, method=scipy_method)
        assert got.estimate == pytest.approx(k / n)
        assert (got.low, got.high) == pytest.approx((ref.low, ref.high), abs=1e-9)


def test_small_or_bad_samples():
    one = mean_interval([0.3])
    assert one.low == -math.inf and one.high == math.inf and one.estimate == 0.3
    nan = mean_interval([0.1, math.nan, 0.2])
    assert math.isnan(nan.estimate) and not nan.finite
    with pytest.raises(ValueError, match="at least one"):
        mean_interval([])
    with pytest.raises(ValueError, match="method must be"):
        mean_interval([1.0, 2.0], "z")
    with pytest.raises(ValueError, match="successes"):
        share_interval(3, 2)
    with pytest.raises(ValueError, match="level"):
        share_interval(1, 2, level=1.0)


def test_seeds_to_decide():
    interval = Interval(0.5, 0.3, 0.7, "t", 5)
    # the half-width 0.2 must shrink to the gap 0.1: four times the seeds
    assert seeds_to_decide(interval, 0.4) == 20
    assert seeds_to_decide(interval, 0.6) == 20
    assert seeds_to_decide(interval, 0.5) is None
    assert seeds_to_decide(Interval(0.5, -math.inf, math.inf, "t", 1), 0.4) is None
    assert seeds_to_decide(interval, 0.1) == 5  # already clear of it


sample = st.lists(
    st.floats(min_value=-1e3, max_value=1e3, allow_nan=False), min_size=2, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(sample)
def test_sign_test_interval_matches_scipy_and_brute_force(xs):
    got = median_interval(xs)
    n, ordered = len(xs), np.sort(xs)
    # brute force: the widest symmetric pair of order statistics whose exact binomial
    # coverage 1 - 2 P(B <= r - 1) reaches 95%
    ranks = [
        r
        for r in range(1, (n + 1) // 2 + 1)
        if 1 - 2 * sum(math.comb(n, i) for i in range(r)) / 2**n >= 0.95
    ]
    assert got.estimate == pytest.approx(float(np.median(xs)))
    if not ranks:
        assert got.low == -math.inf and got.high == math.inf and n < 6
        return
    r = max(ranks)
    assert (got.low, got.high) == (ordered[r - 1], ordered[n - r])
    ref = stats.quantile_test(xs, q=0.0, p=0.5).confidence_interval(0.95)
    assert (got.low, got.high) == (ref.low, ref.high)


def test_sign_test_needs_six_values_at_95_percent():
    assert [sign_test_rank(n) for n in (5, 6, 10, 20)] == [0, 1, 2, 6]
    assert sign_test_rank(5, level=0.9) == 1  # 1 - 2/32 = 0.9375 covers 90%


@settings(max_examples=30, deadline=None)
@given(sample, st.sampled_from(["t", "bootstrap", "bca"]))
@example(xs=[0.0, 3.2043658835217594e-129], method="bca")  # BCa's acceleration underflowed
def test_intervals_widen_with_the_level_and_hold_the_estimate(xs, method):
    narrow = mean_interval(xs, method, level=0.8)
    wide = mean_interval(xs, method, level=0.99)
    assert wide.low <= narrow.low + 1e-9 and narrow.high <= wide.high + 1e-9
    assert wide.low <= wide.estimate <= wide.high
    assert mean_interval(xs, method) == mean_interval(xs, method)  # deterministic


@pytest.mark.parametrize("method", ["t", "bootstrap", "bca"])
def test_mean_intervals_cover_about_95_percent(method):
    """Coverage sanity over 300 normal samples of 20: within a few points of the level
    (bootstrap intervals run a little short at n = 20, never by much)."""
    rng = np.random.default_rng(11)
    hits = [
        (i := mean_interval(rng.normal(2.0, 1.0, size=20), method, resamples=2000)).low
        <= 2.0
        <= i.high
        for _ in range(300)
    ]
    assert 0.88 <= np.mean(hits) <= 0.99


def test_bca_matches_scipy():
    rng = np.random.default_rng(5)
    xs = rng.lognormal(0.0, 1.0, size=30)  # a skewed ratio-like sample
    got = mean_interval(xs, "bca", resamples=20_000)
    ref = stats.bootstrap(
        (xs,), np.mean, method="BCa", n_resamples=20_000, random_state=1
    ).confidence_interval
    width = ref.high - ref.low
    assert got.low == pytest.approx(ref.low, abs=0.05 * width)
    assert got.high == pytest.approx(ref.high, abs=0.05 * width)
    percentile = mean_interval(xs, "bootstrap", resamples=20_000)
    assert got.high > percentile.high  # skew moves BCa's upper end out


def test_wilson_and_clopper_pearson_known_values():
    # Wilson 95% for 8 of 10: (0.4902, 0.9433); Clopper-Pearson: (0.4439, 0.9748)
    wilson = share_interval(8, 10, "wilson")
    exact = share_interval(8, 10, "clopper-pearson")
    assert (wilson.low, wilson.high) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert (exact.low, exact.high) == pytest.approx((0.4439, 0.9748), abs=1e-4)
    # 10 of 10: the exact lower end is (alpha/2)^(1/n)
    assert share_interval(10, 10, "clopper-pearson").low == pytest.approx(0.025 ** (1 / 10))


def test_zero_width_intervals_are_degenerate():
    assert mean_interval([0.0] * 10, "t").degenerate
    assert mean_interval([1.0] * 10, "bca").degenerate
    assert median_interval([3.0] * 10).degenerate
    assert not mean_interval([0.0, 1e-9, 0.0], "t").degenerate
    assert not share_interval(10, 10, "clopper-pearson").degenerate  # a share has a spread
    assert not mean_interval([1.0]).degenerate  # no interval at all is not zero width


def test_sign_test_seeds_to_decide():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    interval = median_interval(values)
    # every value above 0.5: six seeds make the exact interval clear it
    assert seeds_to_decide(interval, 0.5, values) == 6
    # one of five on the far side: the rank must exceed a fifth of the seeds
    assert seeds_to_decide(interval, 1.5, values) == next(
        n for n in range(5, 200) if n / 5 < sign_test_rank(n)
    )
    assert seeds_to_decide(interval, 3.0, values) is None


def test_modes_split_at_declared_gaps():
    purity = [0.7513, 0.5061, 0.7502, 0.749, 0.7549, 0.5015, 0.7545, 0.5084, 0.5013, 0.5083]
    low, high = modes(purity, 0.125)
    assert (low.count, high.count) == (5, 5)
    assert low.mean == pytest.approx(0.50512) and high.low == 0.749
    assert len(modes(purity, 0.3)) == 1
    with pytest.raises(ValueError, match="gap"):
        modes(purity, 0.0)

"""The report's intervals against scipy.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from implicit_em.report.judging.stats import (
    METHOD_NAMES,
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


# The classes of bug the judging plumbing had: a constant with rounding noise read as a spread,
# an interval on a bounded quantity running past its bound, a bootstrap on a handful of seeds.

constants = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=80, deadline=None)
@given(
    constants,
    st.lists(st.floats(min_value=-1.0, max_value=1.0), min_size=2, max_size=30),
    st.sampled_from(["t", "bootstrap", "bca", "sign-test"]),
)
def test_a_constant_with_rounding_noise_is_degenerate(c, noise, method):
    """Each value off the constant by at most four float32 ulps (2^-21 relative): a constant
    computed in float32, not a spread over seeds."""
    xs = [c * (1.0 + 2.0**-21 * e) for e in noise]
    interval = median_interval(xs) if method == "sign-test" else mean_interval(xs, method)
    assert interval.degenerate or not interval.finite  # the sign test needs six values


@settings(max_examples=80, deadline=None)
@given(
    st.floats(min_value=1e-6, max_value=1e6),
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=30),
    st.sampled_from(["t", "bootstrap", "bca"]),
)
def test_a_spread_above_the_tolerance_is_not_degenerate(c, shape, method):
    """Values whose range is 1e-4 of their size (a real spread over seeds) are read as one."""
    xs = [c * (1.0 + 1e-4 * u) for u in [0.0, 1.0, *shape]]
    assert not mean_interval(xs, method).degenerate


def test_published_constants_read_as_degenerate():
    """E19's bare arm (0.0625 up to 3e-10 over 12 seeds) and E4's robust share on blobs
    (0.667 to the last bit) are constants; a share of unanimous outcomes is not."""
    bare = [
        0.06250000012287998,
        0.06250000000000258,
        0.06250000000000172,
        0.06250000000005468,
        0.06250000006371512,
        0.06250000000000061,
        0.062500000000001,
        0.0625000000000018,
        0.06250000000347203,
        0.06250000026541325,
        0.06250000000000161,
        0.06250000028513253,
    ]
    assert mean_interval(bare, "t").degenerate
    assert mean_interval([2 / 3] * 9 + [0.6666666666666669], "t").degenerate
    assert mean_interval([0.0, 1e-15, 0.0], "t").degenerate  # below the absolute floor
    assert not share_interval(10, 10, "clopper-pearson").degenerate


unit_values = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=30)


@settings(max_examples=80, deadline=None)
@given(unit_values, st.sampled_from(["t", "bootstrap", "bca"]))
@example(xs=[1.0] * 9 + [0.75], method="t")  # E4's no-competition share ran to 1.015
def test_an_interval_on_a_bounded_quantity_stays_inside_its_bounds(xs, method):
    interval = mean_interval(xs, method, bounds=(0.0, 1.0))
    assert 0.0 <= interval.low <= interval.estimate <= interval.high <= 1.0
    above = mean_interval([1.0 + v for v in xs], method, bounds=(1.0, math.inf))
    assert above.low >= 1.0 and above.high < math.inf


def test_bounds_clip_only_the_end_that_runs_past():
    free = mean_interval([0.9, 1.0, 1.0, 0.95, 1.0], "t")
    bounded = mean_interval([0.9, 1.0, 1.0, 0.95, 1.0], "t", bounds=(0.0, 1.0))
    assert free.high > 1.0 and bounded.high == 1.0 and bounded.low == free.low
    with pytest.raises(ValueError, match="outside its bounds"):
        mean_interval([0.5, 1.2], "t", bounds=(0.0, 1.0))
    with pytest.raises(ValueError, match="outside its bounds"):
        median_interval([-0.5, 0.2] * 4, bounds=(0.0, 1.0))


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 9).flatmap(
        lambda n: st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=n, max_size=n)
    ),
    st.sampled_from(["bootstrap", "bca"]),
)
def test_below_ten_values_a_bootstrap_falls_back_to_student_t(xs, method):
    got, t = mean_interval(xs, method), mean_interval(xs, "t")
    assert (got.estimate, got.low, got.high) == (t.estimate, t.low, t.high)
    assert got.method == f"t-for-{method}"
    assert "Student t" in METHOD_NAMES[got.method] and "n ≥ 10" in METHOD_NAMES[got.method]


@settings(max_examples=20, deadline=None)
@given(
    st.integers(10, 30).flatmap(
        lambda n: st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=n, max_size=n)
    ),
    st.sampled_from(["bootstrap", "bca"]),
)
def test_from_ten_values_the_bootstrap_is_used(xs, method):
    got = mean_interval(xs, method, resamples=500)
    assert got.method == method
    assert min(xs) <= got.low <= got.high <= max(xs)  # a bootstrap stays in the data's range


def test_every_seed_at_a_bound_is_a_unanimous_outcome_not_a_constant():
    """A bounded quantity whose every seed sits at one of its bounds (E4: all 20 units gain
    every cluster, 1.0) is read by the exact interval of the share of seeds at that bound:
    for x in [l, u], E x >= l + (u - l) P(x = u). An interior constant stays degenerate."""
    top = mean_interval([1.0] * 10, "t", bounds=(0.0, 1.0))
    assert not top.degenerate and top.method == "unanimous"
    assert (top.estimate, top.low, top.high) == pytest.approx((1.0, 0.025 ** (1 / 10), 1.0))
    bottom = mean_interval([0.0] * 10, "bca", bounds=(0.0, 1.0))
    assert (bottom.low, bottom.high) == pytest.approx((0.0, 1 - 0.025 ** (1 / 10)))
    assert mean_interval([2 / 3] * 10, "t", bounds=(0.0, 1.0)).degenerate
    assert mean_interval([0.0] * 10, "t", bounds=(0.0, math.inf)).degenerate  # open above
    assert mean_interval([1.0] * 10, "t").degenerate  # no bounds declared
    assert "Clopper" in METHOD_NAMES["unanimous"]


@settings(max_examples=40, deadline=None)
@given(
    st.floats(min_value=-10.0, max_value=10.0),
    st.floats(min_value=0.01, max_value=10.0),
    st.integers(2, 30),
    st.booleans(),
)
def test_a_unanimous_outcome_reads_the_exact_share_on_its_bounds(low, width, n, at_top):
    bounds = (low, low + width)
    interval = mean_interval([bounds[at_top]] * n, "t", bounds=bounds)
    share = share_interval(n if at_top else 0, n, "clopper-pearson")
    assert interval.low == pytest.approx(low + width * share.low)
    assert interval.high == pytest.approx(low + width * share.high)
    assert bounds[0] <= interval.low <= interval.estimate <= interval.high <= bounds[1]

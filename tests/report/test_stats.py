"""The report's intervals against scipy.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from implicit_em.report.stats import Interval, mean_interval, seeds_to_decide, share_interval

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

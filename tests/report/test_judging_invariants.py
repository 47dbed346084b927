"""Invariants of the judging plumbing, over every criterion of every experiment.

For each criterion, on what an experiment really measured:

* **units**: each sample list holds exactly one value per seed (or per unit its protocol
  declares, at most that many where it declares a subset), and a per-data-set list names a data
  set of that experiment (every one of them);
* **degeneracy**: a reading is `degenerate` exactly when its values' range is within the stated
  rounding tolerance (a share, read from its count, never is);
* **bounds**: every interval lies inside the quantity's declared bounds ([0, 1] for a share);
* **bootstrap**: a bootstrap interval rests on at least 10 values; below, Student t, named so;
* **alternatives**: a criterion read again (`items.alternatives.rejudged`, what every
  alternative of an item reads) gives each data set's reading exactly as the experiment's rule
  did, degeneracy included.

Read at smoke size, on each experiment's smoke run (shared with `test_experiments.py`), and on
the committed quick and full reports for every experiment whose measurement is still current
(`publishing.freshness`): one whose measurement code, data or configuration changed since
is skipped there, saying so, since its samples no longer describe the code (the smoke run
checks it). The smoke runs have one seed, so the interval invariants bite on the reports.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from implicit_em.report import select
from implicit_em.report.items.alternatives import rejudged
from implicit_em.report.judging.criterion import Criterion, Evaluation
from implicit_em.report.judging.readings import Reading
from implicit_em.report.judging.rule import Rule
from implicit_em.report.judging.stats import (
    BOOTSTRAP_MIN_N,
    DEGENERATE_ATOL,
    DEGENERATE_RTOL,
    SHARE_METHODS,
    Interval,
)
from implicit_em.report.publishing.freshness import published_document, stale_experiments
from implicit_em.report.running.registry import Experiment

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = select(None)
BY_ID = {e.id: e for e in EXPERIMENTS}
REPORTS = {"quick": ROOT / "results" / "quick", "full": ROOT / "results" / "full"}


def unit_problems(
    experiment: Experiment, config: Mapping[str, Any], samples: Mapping[str, Sequence[float]]
) -> list[str]:
    """Where a criterion's sample lists break the units invariant (empty: none)."""
    problems = []
    for c in experiment.rule.criteria:
        lists = c.sample_lists(samples)
        if c.combine:
            named = {key.split("@", 1)[1] for key in samples if key.startswith(f"{c.number}@")}
            if named and named != set(experiment.data_sets):
                problems.append(
                    f"{c.number}: lists for {sorted(named)}, data sets {list(experiment.data_sets)}"
                )
        elif set(lists) - {""}:
            problems.append(f"{c.number}: one list expected, got {sorted(lists)}")
        n = c.units.count(config)
        for label, values in lists.items():
            fits = len(values) <= n if c.units.subset else len(values) == n
            if not fits:
                per = " x ".join(c.units.per)
                problems.append(f"{c.number}@{label}: {len(values)} values for {n} units ({per})")
    return problems


def _degenerate_by_tolerance(c: Criterion, values: Sequence[float], finite: bool) -> bool | None:
    """Whether `values` are a constant to rounding (the stated tolerance, on the values'
    own size); None within 1% of the tolerance, where the interval's size may decide."""
    if c.method in SHARE_METHODS or not finite or not values:
        return False
    if len(values) >= 2 and all(math.isfinite(b) for b in c.limits):
        slack = DEGENERATE_RTOL * max(abs(b) for b in c.limits) + DEGENERATE_ATOL
        if any(all(abs(v - b) <= slack for v in values) for b in c.limits):
            return False  # every seed at a bound: a unanimous outcome, read by its share
    tolerance = DEGENERATE_RTOL * max(abs(v) for v in values) + DEGENERATE_ATOL
    spread = max(values) - min(values)
    return None if abs(spread - tolerance) <= 0.01 * tolerance else spread <= tolerance


def reading_problems(evaluation: Evaluation) -> list[str]:
    """Where a criterion's readings break the degeneracy, bounds, bootstrap or alternative
    invariants (empty: none)."""
    c, problems = evaluation.criterion, []
    low_bound, high_bound = (0.0, 1.0) if c.method in SHARE_METHODS else c.limits
    record = evaluation.as_dict()
    for r in evaluation.readings:
        i, where = r.interval, f"{c.number}@{r.label}" if r.label else c.number
        values = [float(v) for v in r.values]
        expected = _degenerate_by_tolerance(c, values, i.finite)
        if expected is not None and (r.status == "degenerate") != expected:
            problems.append(f"{where}: read {r.status}, range {max(values) - min(values):.3g}")
        if i.finite and not low_bound <= i.low <= i.high <= high_bound:
            problems.append(f"{where}: [{i.low}, {i.high}] leaves [{low_bound}, {high_bound}]")
        if i.finite and i.method in ("bootstrap", "bca") and i.n < BOOTSTRAP_MIN_N:
            problems.append(f"{where}: {i.method} on {i.n} values")
        few = c.method in ("bootstrap", "bca") and 2 <= i.n < BOOTSTRAP_MIN_N
        if few and i.method not in (f"t-for-{c.method}", "unanimous"):
            problems.append(f"{where}: {c.method} below 10 values read as {i.method}")
        again = rejudged(record, values)
        alone = again["readings"][0]
        mine = r.as_dict()
        if any(
            alone[k] != mine[k] and not _both_nan(alone[k], mine[k])
            for k in alone
            if k != "data_set"
        ):
            problems.append(f"{where}: read again as {alone}, by the rule as {mine}")
    return problems


def _both_nan(a: Any, b: Any) -> bool:
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def _problems(experiment: Experiment, config: Mapping[str, Any], samples: Mapping) -> list[str]:
    problems = unit_problems(experiment, config, samples)
    for evaluation in experiment.rule.evaluate(samples):
        problems += reading_problems(evaluation)
    return problems


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.id)
def test_smoke_samples_keep_the_judging_invariants(experiment, smoke_run):
    outcome, _ = smoke_run(experiment)
    assert _problems(experiment, experiment.configs["smoke"], outcome.samples) == []


@cache
def _committed(size: str) -> tuple[dict[str, dict], dict[str, str]]:
    """The committed report of `size`: its entries by id, and for each experiment whose
    measurement is no longer current, why."""
    document = published_document(REPORTS[size])
    if document is None:
        return {}, {}
    entries = {e["id"]: e for e in document["experiments"] if e.get("samples")}
    stale = {
        s.id: s.reason for s in stale_experiments(document, EXPERIMENTS) if s.kind == "measurement"
    }
    return entries, stale


def _entry(experiment: Experiment, size: str) -> dict:
    entry = _committed(size)[0].get(experiment.id)
    if entry is None:
        pytest.skip(f"{experiment.id} measured nothing in the committed {size} report")
    return entry


@pytest.mark.parametrize("size", list(REPORTS))
@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.id)
def test_committed_samples_read_by_the_current_rule_keep_the_reading_invariants(experiment, size):
    """Whatever the samples, the current rule reads them within the invariants."""
    samples = _entry(experiment, size)["samples"]
    problems = [p for e in experiment.rule.evaluate(samples) for p in reading_problems(e)]
    assert problems == []


@pytest.mark.parametrize("size", list(REPORTS))
@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.id)
def test_committed_samples_hold_one_value_per_unit(experiment, size):
    """Only where the committed samples still describe the measurement code: an experiment
    whose measurement changed since is checked at smoke size alone, until it is run again."""
    entry = _entry(experiment, size)
    stale = _committed(size)[1].get(experiment.id)
    if stale:
        pytest.skip(f"{experiment.id}'s measurement changed since its {size} run: {stale}")
    assert unit_problems(experiment, experiment.configs[size], entry["samples"]) == []


def _evaluation(c: Criterion, reading: Reading) -> Evaluation:
    return Evaluation(c, reading.interval, reading.status, (reading,))


def test_the_invariants_catch_each_bug_they_guard():
    """Each check fails on the bug it was written for: samples keyed by seed, a constant with
    rounding noise read as a spread, an interval past its bound, a bootstrap on five values;
    and passes on the readings the rule gives now."""
    e3 = BY_ID["E3"]
    config = {**e3.configs["smoke"], "seeds": [7, 8]}
    key = "gd_heldout_reached_share"
    by_seed = {f"{key}@7": [1.0, 1.0], f"{key}@8": [0.0, 1.0]}
    assert unit_problems(e3, config, by_seed)
    assert unit_problems(e3, config, {f"{key}@synthetic": [1.0, 1.0], f"{key}@wine": [0.0]})
    assert (
        unit_problems(e3, config, {f"{key}@synthetic": [1.0, 1.0], f"{key}@wine": [0.0, 1.0]}) == []
    )

    share = Criterion("s", ">=", 0.5, "s", claim="C4", direction="supports", bounds=(0, 1))
    noisy = tuple(0.0625 * (1 + 1e-9 * k) for k in range(12))
    spread = Reading("", Interval(0.0625, 0.0624999, 0.0625001, "t", 12, 1.1e-11), "not met", noisy)
    assert reading_problems(_evaluation(share, spread))
    values = (1.0,) * 9 + (0.75,)
    past = Reading("", Interval(0.975, 0.9348, 1.0152, "t", 10, 0.25), "met", values)
    assert reading_problems(_evaluation(share, past))
    bca = dataclasses.replace(share, method="bca")
    few = (0.6, 0.7, 0.8, 0.9, 0.65)
    five = Reading("", Interval(0.73, 0.64, 0.84, "bca", 5, 0.3), "met", few)
    assert reading_problems(_evaluation(bca, five))
    for c, measured in ((share, noisy), (share, values), (bca, few)):
        (now,) = Rule((c,)).evaluate({"s": list(measured)})
        assert reading_problems(now) == []


def test_t3_reads_one_sample_per_seed_on_each_data_set(smoke_run):
    """E3's held-out criterion (T3) once keyed its samples by seed: "0.5 [0.013, 0.987], 2
    samples" per seed. Each data set (synthetic, wine) has one value per seed."""
    e3 = BY_ID["E3"]
    outcome, _ = smoke_run(e3)
    (criterion,) = [c for c in e3.rule.criteria if c.number == "gd_heldout_reached_share"]
    lists = criterion.sample_lists(outcome.samples)
    assert {k: len(v) for k, v in lists.items()} == {
        name: len(e3.configs["smoke"]["seeds"]) for name in ("synthetic", "wine")
    }

"""An item's alternatives are read by the same function as its primary reading, degeneracy and
declared bounds included: `rejudged` is `Criterion.evaluation` on other values or another
threshold."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em.report.items.alternatives import alternative_readings, rejudged
from implicit_em.report.items.registry import registry_from_data
from implicit_em.report.judging.rule import Criterion, Rule

SHARE = Criterion(
    "gain", ">=", 0.5, "most clusters gained", claim="C4", direction="supports", combine="all"
)
BOUNDED = Criterion(
    "kept", ">=", 0.9, "kept", claim="C4", direction="supports", method="t", bounds=(0, 1)
)
MARKS = {
    "controls": {"positive": "met", "negative": "not met"},
    "negative_control": {"kind": "realistic", "removes": "the normalization, in a rival"},
}


def _record(criterion: Criterion, samples: dict) -> dict:
    """The results.json criterion the experiment's rule writes, with its item marks."""
    (evaluation,) = Rule((criterion,)).evaluate(samples)
    return {**evaluation.as_dict(), **MARKS}


def test_a_constant_data_set_read_alone_is_degenerate_as_in_the_primary():
    """C4's flip 'under wine alone: mixed' came from wine's constant 1.0 read as an interval."""
    samples = {"gain@blobs": [0.9, 0.6, 1.0, 0.7, 0.8], "gain@wine": [1.0] * 5}
    record = _record(SHARE, samples)
    wine = next(r for r in record["readings"] if r["data_set"] == "wine")
    assert wine["status"] == "degenerate"
    alone = rejudged(record, samples["gain@wine"])
    assert alone["status"] == "degenerate"  # a gate: it casts no vote
    assert alone["readings"][0]["gate_passed"] is True


def test_under_a_data_set_whose_seeds_all_agree_nothing_votes():
    samples = {"gain@blobs": [0.1, 0.2, 0.15, 0.05, 0.1], "gain@wine": [1.0] * 5}
    experiments = [
        {
            "id": "E4",
            "verdict": "fails",
            "criteria": [_record(SHARE, samples)],
            "gates": [],
            "samples": samples,
        }
    ]
    item = {
        "parts": [{"id": "p", "quote": "spread out", "criteria": ["E4:gain"]}],
        "alternatives": [{"id": "wine alone", "kind": "dataset", "says": "w", "suffix": "@wine"}],
    }
    registry = registry_from_data({"items": {"C4": item}})
    entry = registry.items["C4"]
    index = {("E4", "gain"): experiments[0]["criteria"][0]}
    (wine,) = alternative_readings(entry, index, {"E4": experiments[0]}, "refuted")
    assert wine["verdict"] == "not tested" and not wine["flips"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=15),
    st.floats(min_value=0.05, max_value=0.95),
)
def test_rejudged_is_the_primary_reading_at_another_threshold(values, threshold):
    record = _record(BOUNDED, {"kept": values})
    again = rejudged(record, values, threshold)
    moved = Criterion.from_record(record, threshold)
    expected = moved.evaluation({"": values}).as_dict()
    for key in ("status", "estimate", "low", "high", "threshold", "readings"):
        assert again[key] == expected[key], key
    assert 0.0 <= again["low"] <= again["high"] <= 1.0  # the declared bounds hold
    assert again["controls"] == MARKS["controls"]  # its marks are kept


def test_a_record_round_trips_to_its_criterion():
    record = _record(BOUNDED, {"kept": [0.95, 1.0, 0.97]})
    assert Criterion.from_record(record) == BOUNDED
    with pytest.raises(ValueError, match="low < high"):
        Criterion("x", ">=", 0.5, "x", claim="C4", direction="supports", bounds=(1, 0))


def test_a_record_names_the_interval_it_holds():
    """A BCa criterion on five seeds holds a Student t interval, and its record says so (its
    `method` stays the registered one, which is what reading it again asks for)."""
    bca = Criterion("gap", ">=", 0.0, "gap", claim="m2", direction="supports", method="bca")
    record = _record(bca, {"gap": [0.1, 0.3, 0.2, 0.25, 0.15]})
    assert record["method"] == "bca" and record["readings"][0]["method"] == "t-for-bca"
    assert record["method_name"] == "Student t (bootstrap BCa needs n ≥ 10)"
    assert rejudged(record, [0.1, 0.3, 0.2, 0.25, 0.15])["readings"] == record["readings"]


def test_every_seed_at_the_bound_votes_in_the_primary_and_alone():
    """E4's 20 of 20 units gaining every cluster (1.0 on [0, 1]) is a unanimous outcome read
    by its exact share, [0.69, 1] per data set of 10: met, in the primary and alone."""
    gain = dataclasses.replace(SHARE, bounds=(0, 1))
    samples = {"gain@blobs": [1.0] * 10, "gain@wine": [1.0] * 10}
    record = _record(gain, samples)
    assert record["status"] == "met"
    assert [r["method"] for r in record["readings"]] == ["unanimous", "unanimous"]
    assert rejudged(record, samples["gain@wine"])["status"] == "met"

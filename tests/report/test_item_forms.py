"""The logical form of an item's sentence decides what evidence can decide it (`items.forms`)."""

from __future__ import annotations

import pytest

from implicit_em.report.items.forms import FORMS, part_vote
from implicit_em.report.items.registry import load_registry, registry_from_data
from implicit_em.report.judging.item_verdicts import claim_verdicts, verdict_label

PLANTED = {"positive": "met", "negative": "not met"}
REALISTIC = {"kind": "realistic", "removes": "the mechanism, in a trained rival"}


def _c(number: str, status: str, **marks) -> dict:
    """A results.json criterion that counts: planted controls, a realistic negative control."""
    return {
        "number": number,
        "claim": "C4",
        "status": status,
        "direction": "supports",
        "estimate": 0.0,
        "low": 0.0,
        "high": 0.0,
        "op": "<=",
        "threshold": 1.0,
        "method": "t",
        "controls": PLANTED,
        "negative_control": REALISTIC,
        **marks,
    }


def _e(*criteria: dict, **extra) -> dict:
    gates = [{"name": "identity", "passed": True, "detail": "to rounding"}]
    return {"id": "E1", "verdict": "holds", "criteria": list(criteria), "gates": gates, **extra}


def _part(ident: str, *refs: str, **more) -> dict:
    return {"id": ident, "quote": f"the words of {ident}", "criteria": list(refs), **more}


def _read(entry: dict, *criteria: dict, item: str = "C4", **extra) -> dict:
    registry = registry_from_data({"items": {item: entry}})
    (got,) = claim_verdicts([item], [_e(*criteria, **extra)], registry)
    return got


@pytest.mark.parametrize(
    ("form", "votes", "reads"),
    [
        ("universal", ["for", "for", "against"], "against"),
        ("necessity", ["undecided", "against"], "against"),
        ("necessity", ["for", "undecided"], "undecided"),
        ("existential", ["against", "for"], "for"),
        ("existential", ["against", "undecided"], "undecided"),
        ("existential", ["against", "against"], "against"),
        (None, ["for", "against"], "mixed"),
        ("comparative", ["for", "for"], "for"),
    ],
)
def test_a_part_reads_its_votes_by_the_form(form, votes, reads):
    assert part_vote(form, votes) == reads


def test_a_working_counterexample_refutes_a_necessity_whatever_else_agrees():
    parts = [_part("holds", "E1:a"), _part("necessary", "E1:b", "E1:c")]
    criteria = [_c("a", "met"), _c("b", "met"), _c("c", "not met")]
    got = _read({"form": "necessity", "parts": parts}, *criteria)
    assert got["verdict"] == "refuted" and got["decided_by"] == ["necessary"]
    assert _read({"parts": parts}, *criteria)["verdict"] == "mixed"  # the rule alone: mixed
    # A counterexample whose controls did not come out as planted is not a working one.
    mute = _c("c", "not met", controls={"positive": "met", "negative": "met"})
    assert _read({"form": "necessity", "parts": parts}, *criteria[:2], mute)["verdict"] == (
        "supported"
    )
    # Nor is one whose rival failed its own task: the comparison is undecided.
    baseline = {"says": "the rival works", "gates": [{"number": "r", "op": ">=", "threshold": 1}]}
    failed = _c("c", "not met", baseline=baseline)
    open_ = _read({"form": "universal", "parts": parts}, *criteria[:2], failed, numbers={"r": 0})
    assert verdict_label(open_) == "inconclusive (baseline failed)"


def test_one_working_instance_answers_an_existential_test():
    entry = {"form": "existential", "parts": [_part("instance", "E1:a", "E1:b")]}
    assert _read(entry, _c("a", "met"), _c("b", "not met"))["verdict"] == "supported"
    assert _read(entry, _c("a", "undecided"), _c("b", "not met"))["verdict"] == "inconclusive"
    assert _read(entry, _c("a", "not met"), _c("b", "not met"))["verdict"] == "refuted"
    assert _read(entry, _c("a", "met"), _c("b", "not met"), item="R3")["verdict"] == "stands"


def test_a_sufficiency_is_not_refuted_by_a_necessity_reading_beside_it():
    beside = _part("condition necessary", "E1:b", beside="a reading the sentence does not make")
    entry = {
        "form": "sufficiency",
        "parts": [{"id": "all hold", "quote": "when all hold", "gates": ["E1:identity"]}, beside],
    }
    got = _read(entry, _c("b", "not met"))
    assert got["verdict"] == "verified (algebra)" and got["decided_by"] == ["all hold"]
    finding = next(p for p in got["parts"] if p["id"] == "condition necessary")
    assert finding["reading"] == "against" and finding["beside"]
    assert got["evidence"] == []  # a finding beside the item is not its evidence
    measured = {**entry, "parts": [_part("all hold", "E1:a"), beside]}
    assert _read(measured, _c("a", "undecided"), _c("b", "not met"))["verdict"] == "inconclusive"
    assert _read(measured, _c("a", "met"), _c("b", "not met"))["verdict"] == "supported"


@pytest.mark.parametrize("reading", ["by construction", "uncontrolled", "another mechanism"])
def test_only_a_sound_alternative_makes_an_item_fragile(reading):
    other = {"id": "other", "kind": "criteria", "says": "b", "parts": {"p": ["E1:b"]}}
    criteria = (_c("a", "met"), _c("b", "not met"))
    entry = {"form": "universal", "parts": [_part("p", "E1:a")]}
    shown = _read({**entry, "alternatives": [{**other, "reading": reading}]}, *criteria)
    (alt,) = shown["alternatives"]
    assert shown["verdict"] == "supported" and not shown["fragile_under"]
    assert alt["verdict"] == "refuted" and alt["differs"] and not alt["flips"]
    assert alt["reading"] == reading
    sound = _read({**entry, "alternatives": [other]}, *criteria)
    assert sound["verdict"] == "fragile" and sound["fragile_under"] == ["other"]


def test_a_measure_alternative_is_never_sound_and_an_identity_never_flips():
    measure = {
        "id": "first",
        "kind": "measure",
        "says": "a point estimate",
        "part": "p",
        "experiment": "E1",
        "mean_of": ["x"],
        "op": ">=",
        "threshold": 1.0,
    }
    parts = [_part("p", "E1:a")]
    got = _read({"parts": parts, "alternatives": [measure]}, _c("a", "met"), numbers={"x": 0.0})
    assert got["alternatives"][0]["reading"] == "uncontrolled"
    assert got["alternatives"][0]["differs"] and got["verdict"] == "supported"
    with pytest.raises(ValueError, match="never sound"):
        registry_from_data(
            {"items": {"C4": {"parts": parts, "alternatives": [{**measure, "reading": "sound"}]}}}
        )
    identity = {
        "form": "identity",
        "parts": [{"id": "p", "quote": "an identity", "gates": ["E1:identity"]}],
        "alternatives": [{"id": "m", "kind": "criteria", "says": "m", "parts": {"p": ["E1:a"]}}],
    }
    algebra = _read(identity, _c("a", "not met"))
    assert algebra["verdict"] == "verified (algebra)" and not algebra["fragile_under"]
    with pytest.raises(ValueError, match="identity is read from gates"):
        registry_from_data({"items": {"C1": {"form": "identity", "parts": parts}}})


def test_a_comparison_counts_only_with_a_rival_shown_to_work():
    entry = {"form": "comparative", "parts": [_part("p", "E1:a")]}
    got = _read(entry, _c("a", "met"))
    assert verdict_label(got) == "not tested (rival not shown to work)"
    baseline = {"says": "the rival works", "gates": [{"number": "r", "op": ">=", "threshold": 1}]}
    assert _read(entry, _c("a", "met", baseline=baseline), numbers={"r": 2})["verdict"] == (
        "supported"
    )


def test_a_measure_changed_after_its_data_were_seen_marks_the_item_exploratory():
    seen = {"date": "2026-12-06", "changed": "the primary moved", "first_read": "0.9, met"}
    entry = {"form": "universal", "parts": [_part("p", "E1:a")]}
    earlier = {"started": "2026-12-05 00:00:00 UTC"}
    got = _read({**entry, "seen": [seen]}, _c("a", "met"), **earlier)
    assert got["exploratory"] and "first-stated one read 0.9, met" in got["exploratory_reason"]
    fresh = {"started": "2026-12-08 00:00:00 UTC"}  # measured after the change: confirms it
    assert not _read({**entry, "seen": [seen]}, _c("a", "met"), **fresh)["exploratory"]
    assert not _read(entry, _c("a", "met"), **earlier)["exploratory"]
    with pytest.raises(ValueError, match="first_read"):
        registry_from_data({"items": {"C4": {**entry, "seen": [{"date": "d", "changed": "c"}]}}})


def test_a_presentation_item_is_decided_by_reading_the_text():
    read = {"id": "p", "quote": "imported", "reads": "for", "read_why": "§5.1 says so"}
    got = _read({"form": "presentation", "parts": [read]}, item="m3")
    assert verdict_label(got) == "stands (by reading)"
    for other in ({"form": "universal"}, {}):
        with pytest.raises(ValueError, match="only an item about presentation"):
            registry_from_data({"items": {"m3": {**other, "parts": [read]}}})


def test_an_unknown_or_missing_form_is_refused_naming_the_item():
    parts = [_part("p", "E1:a")]
    with pytest.raises(ValueError, match="item C4: unknown form 'conditional'"):
        registry_from_data({"items": {"C4": {"form": "conditional", "parts": parts}}})
    with pytest.raises(ValueError, match="item C4: needs a form"):
        registry_from_data({"items": {"C4": {"parts": parts}}}, ["C4"])


def test_every_registered_item_states_its_form_and_the_words_that_decide_it():
    registry = load_registry()
    assert all(item.form in FORMS and item.form_why for item in registry.items.values())
    forms = {i: registry.items[i].form for i in ("C3", "C11", "T1", "R3", "m3")}
    assert forms == {
        "C3": "sufficiency",
        "C11": "necessity",
        "T1": "existential",
        "R3": "existential",
        "m3": "presentation",
    }
    # The prefix MLP failing under the same cross-entropy supports R3: read the other way.
    weighting, necessity = registry.items["R3"].verdict_parts  # two clauses, both needed
    prefix = [r for r in weighting.criteria if r.number.endswith("prefix_over_floor")]
    assert len(prefix) == 3 and {r.direction for r in prefix} == {"refutes"}
    assert [r.number for r in necessity.criteria] == ["sigmoid_minus_ce_bits"]
    # The Brier cells test the loss: beside C11, T1 and R3, never in their verdict.
    for ident in ("C11", "T1", "R3"):
        voting = {r.number for p in registry.items[ident].verdict_parts for r in p.criteria}
        assert not any("brier" in n for n in voting), ident
    assert {i for i, item in registry.items.items() if item.seen} >= {"C5", "T3", "C14b"}


def test_one_data_set_alone_is_shown_but_never_flips():
    """A counterexample found on one data set still refutes a universal claim when the other
    data set alone reads for it: the data-set reading drops votes, it is no other measure."""
    alone = {"id": "b alone", "kind": "dataset", "suffix": "@b", "says": "data set b alone"}
    entry = {"form": "universal", "parts": [_part("p", "E1:a")], "alternatives": [alone]}
    samples = {"a": [0.1, 0.2, 3.0, 3.1], "a@x": [3.0, 3.1, 3.05], "a@b": [0.1, 0.2, 0.15]}
    got = _read(entry, _c("a", "not met"), samples=samples)
    (alt,) = got["alternatives"]
    assert got["verdict"] == "refuted" and not got["fragile_under"]
    assert alt["verdict"] == "supported" and alt["differs"] and not alt["flips"]


def test_a_part_read_from_some_of_its_own_criteria_is_shown_but_never_flips():
    """An existential part answered by one instance keeps its answer when an alternative reads
    it from its other criteria alone; another measure of the same quantity may still flip it."""
    some = {"id": "b alone", "kind": "criteria", "says": "b alone", "parts": {"p": ["E1:b"]}}
    other = {"id": "c instead", "kind": "criteria", "says": "c", "parts": {"p": ["E1:c"]}}
    entry = {"form": "existential", "parts": [_part("p", "E1:a", "E1:b")]}
    criteria = (_c("a", "met"), _c("b", "undecided"), _c("c", "undecided"))
    got = _read({**entry, "alternatives": [some, other]}, *criteria)
    flips = {a["id"]: (a["verdict"], a["flips"]) for a in got["alternatives"]}
    assert flips == {"b alone": ("inconclusive", False), "c instead": ("inconclusive", True)}
    assert got["verdict"] == "fragile" and got["fragile_under"] == ["c instead"]


def _monitors(detect_moe: str, quiet_moe: str, detect_att: str, quiet_att: str) -> dict:
    """C14d-like: two monitors, each needing both detection and quietness."""
    parts = [
        _part("moe detects", "E1:dm", instance="moe"),
        _part("moe quiet", "E1:qm", instance="moe"),
        _part("attention detects", "E1:da", instance="attention"),
        _part("attention quiet", "E1:qa", instance="attention"),
    ]
    criteria = [
        _c("dm", detect_moe),
        _c("qm", quiet_moe),
        _c("da", detect_att),
        _c("qa", quiet_att),
    ]
    return _read({"form": "existential", "parts": parts}, *criteria)


def test_an_instance_must_hold_all_its_parts_at_once():
    # Detection by one monitor and quietness of the other make no monitor that works whole.
    got = _monitors("met", "straddles", "straddles", "met")
    assert got["verdict"] == "inconclusive"
    # Without instances the same votes would answer the item: the hole instances close.
    parts = [_part("detects", "E1:dm", "E1:da"), _part("quiet", "E1:qm", "E1:qa")]
    criteria = [_c("dm", "met"), _c("qm", "straddles"), _c("da", "straddles"), _c("qa", "met")]
    assert _read({"form": "existential", "parts": parts}, *criteria)["verdict"] == "supported"


def test_one_whole_instance_answers_the_item_and_all_must_fail_to_refute_it():
    got = _monitors("met", "met", "not met", "straddles")
    assert got["verdict"] == "supported"
    assert got["decided_by"] == ["moe detects", "moe quiet"]
    assert _monitors("not met", "met", "met", "not met")["verdict"] == "refuted"
    assert _monitors("not met", "met", "straddles", "met")["verdict"] == "inconclusive"


def test_instances_are_for_existential_items_with_a_choice():
    two = [_part("a", "E1:a", instance="x"), _part("b", "E1:b", instance="y")]
    with pytest.raises(ValueError, match="only an existential item"):
        registry_from_data({"items": {"C4": {"form": "universal", "parts": two}}})
    one = [_part("a", "E1:a", instance="x"), _part("b", "E1:b")]
    with pytest.raises(ValueError, match="one instance is no choice"):
        registry_from_data({"items": {"C4": {"form": "existential", "parts": one}}})


def test_a_measure_changed_after_its_data_were_seen_is_confirmed_by_a_later_run():
    seen = [{"date": "2026-06-01 12:00 UTC", "changed": "the measure", "first_read": "0.9"}]
    entry = {"form": "existential", "parts": [_part("holds", "E1:a")], "seen": seen}
    before = _read(entry, _c("a", "met"), started="2026-05-01 00:00:00 UTC")
    assert before["exploratory"] and "first-stated one read 0.9" in before["exploratory_reason"]
    after = _read(entry, _c("a", "met"), started="2026-06-02 00:00:00 UTC")
    assert not after["exploratory"], after["exploratory_reason"]
    unknown = _read(entry, _c("a", "met"))  # no recorded start: measured before, as far as known
    assert unknown["exploratory"]

"""Item verdicts by registered rules: parts, standings, alternatives, links, and the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from implicit_em.report.items.registry import load_registry, registry_from_data
from implicit_em.report.judging.item_verdicts import claim_verdicts, verdict_label
from implicit_em.report.rules.claims import CLAIMS
from implicit_em.report.rules.protocol import PROTOCOL_DIR, load_protocol

ROOT = Path(__file__).resolve().parents[2]
PLANTED = {"positive": "met", "negative": "not met"}
REALISTIC = {"kind": "realistic", "removes": "the mechanism, in a trained rival"}
TRIVIAL = {"kind": "trivial", "why": "an untrained model"}
IDS = sorted(p.stem for p in PROTOCOL_DIR.glob("E*.json"))


def _c(number: str, status: str, direction: str = "supports", **marks) -> dict:
    """A results.json criterion with planted controls and a realistic negative control."""
    return {
        "number": number,
        "claim": "C4",
        "status": status,
        "direction": direction,
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


def _e(eid: str, *criteria: dict, verdict: str = "holds", **extra) -> dict:
    return {"id": eid, "verdict": verdict, "criteria": list(criteria), "gates": [], **extra}


def _read(parts: list, experiments: list, item: str = "C4", **entry) -> dict:
    data = {"items": {item: {"parts": parts, **entry}}}
    (got,) = claim_verdicts([item], experiments, registry_from_data(data))
    return got


def _part(ident: str, *refs) -> dict:
    return {"id": ident, "quote": f"the words of {ident}", "criteria": list(refs)}


def _two_parts(first: str, second: str, item: str = "C4") -> str:
    experiments = [_e("E1", _c("a", first), _c("b", second))]
    return _read([_part("p", "E1:a"), _part("q", "E1:b")], experiments, item)["verdict"]


def test_a_compound_claim_needs_every_part():
    assert _two_parts("met", "met") == "supported"
    assert _two_parts("not met", "not met") == "refuted"
    assert _two_parts("met", "not met") == "refuted"  # a false conjunct decides the conjunction
    assert _two_parts("met", "undecided") == "inconclusive"
    assert _two_parts("not met", "undecided") == "refuted"  # already failed, none for
    assert _two_parts("met", "met", item="R1") == "stands"
    assert _two_parts("not met", "not met", item="R1") == "answered"


def test_a_part_reads_all_its_criteria():
    mixed = _read([_part("p", "E1:a", "E1:b")], [_e("E1", _c("a", "met"), _c("b", "not met"))])
    assert mixed["verdict"] == "mixed" and mixed["parts"][0]["reading"] == "mixed"
    agree = _read([_part("p", "E1:a", "E1:b")], [_e("E1", _c("a", "met"), _c("b", "met"))])
    assert agree["verdict"] == "supported" and agree["decided_by"] == ["p"]
    reversed_ = {"ref": "E1:a", "direction": "refutes", "why": "read the other way"}
    read_against = _read([_part("p", reversed_)], [_e("E1", _c("a", "met"))])
    assert read_against["verdict"] == "refuted"


@pytest.mark.parametrize(
    ("marks", "standing"),
    [
        ({"negative_control": TRIVIAL}, "no realistic negative control"),
        ({"negative_control": None}, "negative control not classified"),
        ({"controls": {"positive": "met", "negative": "met"}}, "controls not as planted"),
        ({"by_construction": "holds for any model"}, "by construction"),
    ],
)
def test_a_criterion_without_standing_casts_no_vote(marks, standing):
    got = _read([_part("p", "E1:a")], [_e("E1", _c("a", "met", **marks))])
    assert got["verdict"] == "not tested" and got["qualifier"] == standing
    assert got["evidence"][0]["vote"] == "no vote"
    assert verdict_label(got) == f"not tested ({standing})"


def test_an_untested_part_keeps_a_compound_claim_open():
    trivial = _c("b", "met", negative_control=TRIVIAL)
    got = _read([_part("p", "E1:a"), _part("q", "E1:b")], [_e("E1", _c("a", "met"), trivial)])
    assert got["verdict"] == "inconclusive" and got["decided_by"] == ["q"]
    against = _read(
        [_part("p", "E1:a"), _part("q", "E1:b")], [_e("E1", _c("a", "not met"), trivial)]
    )
    assert against["verdict"] == "refuted"


def test_construction_with_a_stated_reason_verifies_by_algebra():
    built = _c("a", "met", by_construction="coverage is 1/4 for any data")
    part = {**_part("p", "E1:a"), "algebra": "the normalizer is what moves prototypes"}
    assert _read([part], [_e("E1", built)])["verdict"] == "verified (algebra)"
    gate = {"id": "g", "quote": "an identity", "gates": ["E1:err"]}
    passed = _e("E1", gates=[{"name": "err", "passed": True, "detail": "ok"}])
    failed = _e("E1", gates=[{"name": "err", "passed": False, "detail": "off"}])
    assert _read([gate], [passed])["verdict"] == "verified (algebra)"
    assert _read([gate], [failed])["verdict"] == "violated (algebra)"
    assert _read([gate], [{**passed, "verdict": "not run"}])["verdict"] == "not tested"
    # A gate an older run did not measure (added since) neither verifies nor violates.
    unmeasured = _e("E1", gates=[{"name": "err", "passed": None, "detail": "not measured"}])
    assert _read([gate], [{**unmeasured, "verdict": "invalid"}])["verdict"] == "not tested"


def test_a_gate_whose_number_was_not_measured_has_no_pass():
    from implicit_em.report.judging.rule import Gate, GateResult

    gate = Gate(number="err", op="<=", threshold=1e-6, means="an identity")
    assert GateResult.of(gate, {}).as_dict()["passed"] is None
    assert GateResult.of(gate, {"err": 0.0}).as_dict()["passed"] is True


def test_an_untestable_item_is_not_tested_with_its_reason():
    got = _read(
        [_part("p", "E1:a")], [_e("E1", _c("a", "met"))], not_testable="presentation: prose"
    )
    assert verdict_label(got) == "not tested (presentation)" and got["reason"] == (
        "presentation: prose"
    )


def test_a_failed_baseline_makes_a_comparison_inconclusive():
    baseline = {
        "says": "the rival specialises",
        "gates": [{"number": "rival", "op": ">=", "threshold": 0.5}],
    }
    compared = _c("a", "met", baseline=baseline)
    failed = _read([_part("p", "E1:a")], [_e("E1", compared, numbers={"rival": 0.0})])
    assert failed["verdict"] == "inconclusive" and failed["qualifier"] == "baseline failed"
    assert failed["evidence"][0]["standing"] == "baseline failed"
    worked = _read([_part("p", "E1:a")], [_e("E1", compared, numbers={"rival": 0.9})])
    assert worked["verdict"] == "supported"
    unmeasured = _read([_part("p", "E1:a")], [_e("E1", compared, numbers={})])
    assert unmeasured["verdict"] == "inconclusive"


def _samples_entry(values: dict, **numbers) -> dict:
    c = {**_c("a", "met"), "op": ">=", "threshold": 0.5}
    return _e("E1", c, samples=values, numbers=numbers)


def test_an_alternative_that_flips_the_verdict_makes_it_fragile():
    experiments = [_e("E1", _c("a", "met"), _c("b", "not met"))]
    other = {"id": "other measure", "kind": "criteria", "says": "b", "parts": {"p": ["E1:b"]}}
    same = {"id": "same measure", "kind": "criteria", "says": "a", "parts": {"p": ["E1:a"]}}
    got = _read([_part("p", "E1:a")], experiments, alternatives=[same, other])
    assert got["verdict"] == "fragile" and got["reading"] == "supported"
    assert got["fragile_under"] == ["other measure"]
    assert got["qualifier"] == "under other measure: refuted"
    steady = _read([_part("p", "E1:a")], experiments, alternatives=[same])
    assert steady["verdict"] == "supported" and not steady["fragile_under"]
    trivial = [_e("E1", _c("a", "met"), _c("c", "not met", negative_control=TRIVIAL))]
    mute = {"id": "mute measure", "kind": "criteria", "says": "c", "parts": {"p": ["E1:c"]}}
    unmoved = _read([_part("p", "E1:a")], trivial, alternatives=[mute])
    assert unmoved["verdict"] == "supported"  # nothing votes under it: no reading to flip to
    assert unmoved["alternatives"][0]["verdict"] == "not tested"


def test_first_stated_threshold_and_measure_alternatives():
    entry = _samples_entry({"a": [0.9, 0.92, 0.94, 0.91]}, overlap=0.94)
    threshold = {
        "id": "first stated",
        "kind": "threshold",
        "says": "0.95",
        "criterion": "E1:a",
        "threshold": 0.95,
    }
    measure = {
        "id": "first measure",
        "kind": "measure",
        "says": "mean overlap >= 0.95",
        "part": "p",
        "experiment": "E1",
        "mean_of": ["overlap"],
        "op": ">=",
        "threshold": 0.95,
    }
    got = _read([_part("p", "E1:a")], [entry], alternatives=[threshold, measure])
    under = {a["id"]: a["verdict"] for a in got["alternatives"]}
    assert under == {"first stated": "refuted", "first measure": "refuted"}
    assert got["verdict"] == "fragile"


def test_each_data_set_alone():
    samples = {
        "a": [0.9] * 4 + [0.1] * 4,
        "a@one": [0.9, 0.91, 0.92, 0.93],
        "a@two": [0.1, 0.11, 0.12, 0.1],
    }
    one = {"id": "one alone", "kind": "dataset", "says": "one", "suffix": "@one"}
    two = {"id": "two alone", "kind": "dataset", "says": "two", "suffix": "@two"}
    gone = {"id": "three alone", "kind": "dataset", "says": "three", "suffix": "@three"}
    got = _read([_part("p", "E1:a")], [_samples_entry(samples)], alternatives=[one, two, gone])
    under = {a["id"]: (a["available"], a["verdict"]) for a in got["alternatives"]}
    assert under == {
        "one alone": (True, "supported"),
        "two alone": (True, "refuted"),
        "three alone": (False, None),
    }
    # One data set alone is the per-data-set breakdown: shown, it differs, it flips nothing.
    assert got["verdict"] != "fragile" and got["fragile_under"] == []
    assert [a["flips"] for a in got["alternatives"]] == [False, False, False]


def _linked(t1: str, c11: str) -> dict:
    data = {
        "items": {
            "T1": {"parts": [_part("match", "E11:s")]},
            "C11": {"parts": [_part("reproduce", "E10:t")]},
        },
        "links": [
            {"items": ["T1", "C11"], "contradict": [["supported", "supported"]], "reason": "r"}
        ],
    }
    experiments = [_e("E11", _c("s", t1)), _e("E10", _c("t", c11))]
    return {
        c["id"]: c for c in claim_verdicts(["T1", "C11"], experiments, registry_from_data(data))
    }


def test_contradicting_linked_items_both_read_inconsistent():
    both = _linked("met", "met")
    assert [both[i]["verdict"] for i in ("T1", "C11")] == ["inconsistent", "inconsistent"]
    assert both["C11"]["qualifier"] == "with T1" and both["C11"]["links"][0]["contradicts"]
    apart = _linked("not met", "met")
    assert apart["C11"]["verdict"] == "supported" and not apart["C11"]["links"][0]["contradicts"]
    open_ = _linked("met", "undecided")
    assert open_["T1"]["verdict"] == "supported" and open_["C11"]["verdict"] == "inconclusive"


def test_c11_is_refuted_by_t1s_counterexample_in_the_registry():
    """C11 is a necessity: the log-loss sigmoids matching the posterior (T1's instance) refute
    its "necessary" part, and that decides C11 whatever its other parts read; the Brier cell
    is a finding about the loss beside it and casts no vote."""
    e10 = [
        _c(f"refbudget_{task}_{what}", "met")
        for task in ("bijection", "hmm")
        for what in ("transformer_entropy_mae_bits", "prefix_minus_transformer_bits")
    ]
    for brier in ("met", "not met"):
        e11 = [_c("sigmoid_minus_ce_bits", "met"), _c("brier_minus_ce_bits", brier)]
        experiments = [_e("E10", *e10), _e("E11", *e11)]
        got = {c["id"]: c for c in claim_verdicts(["C11", "T1"], experiments, load_registry())}
        readings = {p["id"]: p["reading"] for p in got["C11"]["parts"] if not p["beside"]}
        assert readings == {"reproduce": "for", "MLPs fail": "for", "necessary": "against"}
        assert got["C11"]["verdict"] == "refuted" and got["C11"]["decided_by"] == ["necessary"]
        assert got["T1"]["verdict"] == "supported"  # the instance answers the existential test


def test_the_registry_names_every_item_and_only_registered_criteria_and_gates():
    registry = load_registry()
    assert set(registry.items) == set(CLAIMS)
    criteria = {(e, c.number) for e in IDS for c in load_protocol(e).criteria}
    gates = {(e, g.number) for e in IDS for g in load_protocol(e).gates}
    for item in registry.items.values():
        for part in item.parts:
            assert {r.key for r in part.criteria} <= criteria, (item.id, part.id)
            assert {r.key for r in part.gates} <= gates, (item.id, part.id)
        for alt in item.alternatives:
            refs = [r for refs in (alt.parts or {}).values() for r in refs]
            assert {r.key for r in refs} <= criteria, (item.id, alt.id)
    alternatives = {
        r.key
        for item in registry.items.values()
        for alt in item.alternatives
        for refs in (alt.parts or {}).values()
        for r in refs
    }
    assert criteria <= registry.refs() | alternatives, "criteria no item reads"
    for e in IDS:  # the item a criterion names reads it, in a part or an alternative
        for c in load_protocol(e).criteria:
            item = registry.items[c.claim]
            reads = {r.key for p in item.parts for r in p.criteria} | {
                r.key
                for alt in item.alternatives
                for refs in (alt.parts or {}).values()
                for r in refs
            }
            assert (e, c.number) in reads, (c.claim, e, c.number)


def test_every_criterion_classifies_its_negative_control():
    realistic = set()
    for e in IDS:
        for c in load_protocol(e).data["criteria"]:
            kind = c.get("negative_control", {})
            assert kind.get("kind") in ("realistic", "trivial"), (e, c["number"])
            assert kind.get("removes") if kind["kind"] == "realistic" else kind.get("why")
            if kind["kind"] == "realistic":
                realistic.add(c["number"])
    assert "wrong_competition" in realistic  # trained one-vs-rest sigmoids
    assert "gd_heldout_reached_share" in realistic  # gradient descent without the normalizer
    assert "lse_gain_one_cluster" in realistic  # correntropy at the same width
    assert "sigmoid_minus_ce_bits" in realistic  # sigmoids trained with an improper loss
    assert "bijection_transformer_over_floor" in realistic  # the position-wise MLP
    assert "cost_gap_mid" not in realistic  # a planted model


def test_bad_registries_are_refused():
    part = _part("p", "E1:a")
    with pytest.raises(ValueError, match="rule must be one of"):
        registry_from_data({"items": {"C4": {"parts": [part], "rule": "any"}}})
    with pytest.raises(ValueError, match="E<n>:<number>"):
        registry_from_data({"items": {"C4": {"parts": [_part("p", "a")]}}})
    with pytest.raises(ValueError, match="no part named"):
        bad = {"id": "x", "kind": "criteria", "says": "s", "parts": {"nope": ["E1:a"]}}
        registry_from_data({"items": {"C4": {"parts": [part], "alternatives": [bad]}}})
    with pytest.raises(ValueError, match="missing items"):
        registry_from_data({"items": {"C4": {"parts": [part]}}}, ["C4", "C5"])


def test_rejudging_a_published_report_is_stable_and_reads_every_item(tmp_path):
    from implicit_em.report.judging.rejudge import rejudge_document as rejudge
    from implicit_em.report.rendering.page import render_html

    document = json.loads((ROOT / "results" / "full" / "results.json").read_text("utf-8"))
    once = rejudge(document)
    assert rejudge(once) == once
    assert [c["id"] for c in once["claim_verdicts"]] == list(CLAIMS)
    assert all(c["rule"] and c["parts"] for c in once["claim_verdicts"])
    assert once["meta"]["item_rules"]["registry"] == load_registry().hash
    for e in once["experiments"]:
        e["figures"] = []
    page = render_html(once, tmp_path)
    assert "rule and parts" in page and "alternatives and links" in page


def test_report_rejudge_rewrites_a_folder_and_refuses_one_without_results(tmp_path):
    from typer.testing import CliRunner

    from implicit_em.cli import app

    document = json.loads((ROOT / "results" / "full" / "results.json").read_text("utf-8"))
    for e in document["experiments"]:
        e["figures"] = []
    document["claim_verdicts"] = []
    (tmp_path / "results.json").write_text(json.dumps(document), "utf-8")
    done = CliRunner().invoke(app, ["report", "--rejudge", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    rejudged = json.loads((tmp_path / "results.json").read_text("utf-8"))
    assert [c["id"] for c in rejudged["claim_verdicts"]] == list(CLAIMS)
    assert (tmp_path / "index.html").is_file() and (tmp_path / "summary.md").is_file()
    empty = CliRunner().invoke(app, ["report", "--rejudge", "--out", str(tmp_path / "none")])
    assert empty.exit_code == 2 and "holds no results.json" in empty.output


def test_an_item_read_from_data_the_rules_postdate_is_exploratory():
    data = {
        "registered": "2026-12-06 20:00:00 UTC",
        "items": {"C4": {"parts": [_part("p", "E1:a")]}},
    }
    registry = registry_from_data(data)
    before = _e("E1", _c("a", "met"), started="2026-12-03 12:00:00 UTC")
    after = _e("E1", _c("a", "met"), started="2026-12-07 12:00:00 UTC")
    amended = {**after, "exploratory": True}
    mute = _e("E1", _c("a", "met", negative_control=TRIVIAL), started="2026-12-03 12:00:00 UTC")
    read = [
        claim_verdicts(["C4"], [e], registry)[0]["exploratory"]
        for e in (before, after, amended, mute)
    ]
    assert read == [True, False, True, False]
    assert registry.hash == registry_from_data({**data, "registered": "later"}).hash


def test_c2_exactly_em_is_refuted_by_t2s_path_gap_in_the_registry():
    """C2's "exactly EM, not an approximation" part reads T2's path gap: gradient descent's path
    within 5% of EM's (met) is for it, a larger gap (T2's finding) a counterexample."""
    from implicit_em.report.items.registry import load_registry

    gates = [{"name": "c2_max_abs_error", "passed": True, "detail": "8.9e-16"}]
    for status, verdict in (("met", "supported"), ("not met", "refuted")):
        experiments = [
            {**_e("E1"), "gates": gates},
            _e("E2", {**_c("gd_path_gap", status), "claim": "T2", "direction": "refutes"}),
        ]
        got = {c["id"]: c for c in claim_verdicts(["C2", "T2"], experiments, load_registry())}
        assert got["C2"]["verdict"] == verdict, status
        assert got["T2"]["verdict"] == ("refuted" if status == "met" else "supported")

"""Gates, criteria on intervals over seeds, verdicts, claim verdicts and the experiment list."""

from __future__ import annotations

import math

import pytest

from implicit_em.report import Criterion, Experiment, Gate, Outcome, Rule, claim_verdicts, select
from implicit_em.report.experiments import EXPERIMENTS
from implicit_em.report.judging import Evaluation

LOW = Criterion("deviation", "<=", 0.1, "the paths agree", claim="C4", direction="supports")
SHARE = Criterion(
    "agree", ">=", 0.5, "most runs agree", claim="R1", direction="refutes", method="wilson"
)
GATE = Gate("identity_error", "<=", 1e-12, "the identity holds")
RULE = Rule((LOW, SHARE), (GATE,))
OK = {"identity_error": 0.0}


def test_holds_partly_fails_on_intervals():
    met = {"deviation": [0.01, 0.02, 0.015, 0.01], "agree": [1.0] * 20}
    not_met = {"deviation": [0.5, 0.6, 0.55, 0.52], "agree": [0.0] * 20}
    assert RULE.judge(OK, met).verdict == "holds"
    assert RULE.judge(OK, not_met).verdict == "fails"
    partly = RULE.judge(OK, {**met, "agree": not_met["agree"]})
    assert partly.verdict == "partly"
    assert "agree" in partly.reason and "wilson" in partly.reason


def test_undecided_resolved_both_ways():
    wide = [0.0, 0.2]  # mean 0.1, a t interval far across the threshold
    # the other criterion not met: undecided gives partly or fails -> inconclusive
    judgement = RULE.judge(OK, {"deviation": wide, "agree": [0.0] * 20})
    assert judgement.verdict == "inconclusive"
    assert "deviation" in judgement.reason and "seeds" in judgement.reason
    # a single seed has no interval: undecided
    assert RULE.judge(OK, {"deviation": [0.01], "agree": [0.0] * 20}).verdict == "inconclusive"
    # NaN samples are undecided, not dropped
    nan = RULE.judge(OK, {"deviation": [0.01, math.nan, 0.02], "agree": [1.0] * 20})
    assert nan.verdict == "inconclusive"
    # one criterion only: undecided cannot be resolved
    single = Rule((LOW,))
    assert single.judge({}, {"deviation": wide}).verdict == "inconclusive"


def test_undecided_that_cannot_change_the_verdict_is_not_inconclusive():
    # With two criteria one met and one not, the third undecided leaves "partly" either way.
    third = Criterion("x", ">", 0.0, "x", claim="C1", direction="supports")
    rule = Rule((LOW, SHARE, third))
    samples = {"deviation": [0.01, 0.02, 0.01], "agree": [0.0] * 20, "x": [-1.0, 1.0]}
    assert rule.judge({}, samples).verdict == "partly"


def test_gates_make_it_invalid_and_missing_samples_not_run():
    met = {"deviation": [0.01, 0.02, 0.015], "agree": [1.0] * 20}
    bad = RULE.judge({"identity_error": 1e-3}, met)
    assert bad.verdict == "invalid" and "identity_error" in bad.reason
    assert RULE.judge({}, met).verdict == "invalid"  # the gate's number is missing
    assert RULE.judge(OK, {"deviation": [0.01]}).verdict == "not run"
    shares = RULE.judge(OK, {**met, "agree": [0.5, 1.0]})
    assert shares.verdict == "not run" and "0.0/1.0" in shares.reason


def test_a_rule_of_gates_alone_holds_when_they_pass():
    algebra = Rule((), (GATE,))
    passed = algebra.judge(OK, {})
    assert passed.verdict == "holds" and "identity_error" in passed.reason
    assert algebra.judge({"identity_error": 1e-3}, {}).verdict == "invalid"
    assert "every gate passes" in algebra.statement


def test_status_edges_and_votes():
    def status(criterion: Criterion, samples: list[float]) -> str:
        return criterion.status(criterion.interval(samples))

    at = Criterion("d", "<=", 0.5, "", claim="C1", direction="supports")
    assert status(at, [0.5, 0.5, 0.5]) == "met"  # on the threshold, <= includes it
    strict = Criterion("d", "<", 0.5, "", claim="C1", direction="supports")
    assert status(strict, [0.5, 0.5, 0.5]) == "not met"
    met = Evaluation(SHARE, SHARE.interval([1.0] * 20), "met")
    assert met.vote == "against"  # met and refutes
    assert Evaluation(LOW, None, "not met").vote == "against"
    assert Evaluation(LOW, None, "undecided").vote == "undecided"


PLANTED = {"positive": "met", "negative": "not met"}


def _entry(eid: str, verdict: str, *criteria: tuple, gates: tuple = ()) -> dict:
    """A results.json entry; each criterion is (claim, status, direction[, primary[, controls]])."""
    rows = []
    for claim, status, direction, *rest in criteria:
        primary = rest[0] if rest else True
        controls = rest[1] if len(rest) > 1 else PLANTED
        rows.append(
            {
                "claim": claim,
                "status": status,
                "direction": direction,
                "number": f"n_{claim}_{status}",
                "estimate": 0.0,
                "low": 0.0,
                "high": 0.0,
                "op": "<=",
                "threshold": 1.0,
                "primary": primary,
                "controls": controls,
            }
        )
    return {
        "id": eid,
        "verdict": verdict,
        "criteria": rows,
        "gates": [{"name": n, "passed": p, "detail": "", "verifies": v} for n, p, v in gates],
    }


def test_claim_verdicts_read_the_primary_criterion():
    experiments = [
        _entry("E1", "partly", ("C4", "met", "supports"), ("R1", "met", "refutes")),
        _entry(
            "E2",
            "fails",
            ("C4", "not met", "supports", False),
            ("R1", "not met", "refutes", False),
        ),
        _entry("E3", "inconclusive", ("C9", "undecided", "supports"), ("m1", "met", "supports")),
        _entry("E4", "invalid", ("C10", "met", "supports")),
        _entry("E5", "holds", ("C6", "not met", "refutes"), ("R4", "met", "refutes")),
    ]
    items = ["C4", "R1", "C9", "m1", "C10", "C6", "R4", "T1"]
    got = {c["id"]: c for c in claim_verdicts(items, experiments)}
    # the secondary votes against, but the item's verdict is its primary's
    assert got["C4"]["verdict"] == "supported" and got["C4"]["experiments"] == ["E1", "E2"]
    assert [v["vote"] for v in got["C4"]["evidence"]] == ["for", "against"]
    assert got["C4"]["primary"] == "n_C4_met" and got["C4"]["primary_experiment"] == "E1"
    assert got["R1"]["verdict"] == "answered"  # met and refutes the objection
    assert got["C9"]["verdict"] == "inconclusive"
    assert got["m1"]["verdict"] == "stands"
    assert got["C10"]["verdict"] == "not tested"  # only an invalid experiment bears on it
    assert got["C10"]["excluded"] == [{"experiment": "E4", "verdict": "invalid"}]
    assert got["C10"]["experiments"] == [] and got["C10"]["evidence"] == []
    assert got["T1"]["excluded"] == [] and got["C4"]["excluded"] == []
    assert got["C6"]["verdict"] == "supported"
    assert got["R4"]["verdict"] == "answered"
    assert got["T1"]["verdict"] == "not tested"


def test_a_criterion_whose_controls_failed_casts_no_vote():
    failed = {"positive": "met", "negative": "met"}
    experiments = [_entry("E1", "holds", ("C6", "met", "supports", True, failed))]
    (got,) = claim_verdicts(["C6"], experiments)
    assert got["verdict"] == "not tested"
    assert got["evidence"][0]["vote"] == "uncontrolled"
    missing = [_entry("E1", "holds", ("C6", "met", "supports", True, None))]
    assert claim_verdicts(["C6"], missing)[0]["verdict"] == "not tested"


def test_items_verified_by_algebra_read_their_gates():
    passed = [_entry("E1", "holds", ("C2", "met", "supports"), gates=(("err", True, "C1"),))]
    assert claim_verdicts(["C1"], passed)[0]["verdict"] == "verified (algebra)"
    failed = [_entry("E1", "holds", ("C2", "met", "supports"), gates=(("err", False, "C1"),))]
    assert claim_verdicts(["C1"], failed)[0]["verdict"] == "violated (algebra)"
    two = (("a", True, "C1"), ("b", True, "C1"))
    both = [_entry("E1", "holds", ("C2", "met", "supports"), gates=two)]
    assert claim_verdicts(["C1"], both)[0]["verdict"] == "verified (algebra)"
    one_fails = (("a", True, "C1"), ("b", False, "C1"))
    mixed = [_entry("E1", "holds", ("C2", "met", "supports"), gates=one_fails)]
    assert claim_verdicts(["C1"], mixed)[0]["verdict"] == "violated (algebra)"
    invalid = [_entry("E1", "invalid", ("C2", "met", "supports"), gates=(("err", False, "C1"),))]
    (got,) = claim_verdicts(["C1"], invalid)
    assert got["verdict"] == "not tested" and got["excluded"] == [
        {"experiment": "E1", "verdict": "invalid"}
    ]


def test_every_item_has_one_primary_and_a_number_is_primary_once():
    from implicit_em.report.claims import CLAIMS

    primaries: dict[str, list[str]] = {}
    for experiment in select(None):
        for c in experiment.rule.criteria:
            if c.primary:
                primaries.setdefault(c.claim, []).append(f"{experiment.id} {c.number}")
    several = {item: p for item, p in primaries.items() if len(p) > 1}
    assert not several, f"items with more than one primary criterion: {several}"
    numbers = [p for ps in primaries.values() for p in ps]
    assert len(numbers) == len(set(numbers))
    voted = {c.claim for e in select(None) for c in e.rule.criteria}
    verified = {g.verifies for e in select(None) for g in e.rule.gates if g.verifies}
    assert voted - set(primaries) - verified == set(), "items with criteria but no primary"
    assert (set(primaries) | verified) <= set(CLAIMS)


def test_bad_declarations_raise():
    with pytest.raises(ValueError, match="op must be one of"):
        Criterion("x", "==", 1.0, "", claim="C1", direction="supports")
    with pytest.raises(ValueError, match="direction"):
        Criterion("x", "<", 1.0, "", claim="C1", direction="maybe")
    with pytest.raises(ValueError, match="method"):
        Criterion("x", "<", 1.0, "", claim="C1", direction="supports", method="z")
    with pytest.raises(ValueError, match="theory item"):
        Criterion("x", "<", 1.0, "", claim="E1", direction="supports")
    with pytest.raises(ValueError, match="at least one criterion or gate"):
        Rule(())
    experiment = _experiment()
    with pytest.raises(ValueError, match="meaning must say"):
        Experiment(**{**experiment, "meaning": {"holds": "x"}})
    with pytest.raises(ValueError, match="controls for numbers no criterion reads"):
        Experiment(**{**experiment, "controls": {"nothing": None}})


def _experiment() -> dict:
    return {
        "id": "E1",
        "title": "t",
        "claims": ("C1",),
        "hypothesis": "h",
        "setup": "s",
        "plan": lambda config: [],
        "aggregate": lambda config, results, out: Outcome({}),
        "headline": (),
        "meaning": {"holds": "a", "partly": "b", "fails": "c"},
        "minutes": {"smoke": 0, "quick": 0, "full": 0},
    }


def test_select_orders_and_rejects_unknown_ids():
    ids = [e.id for e in select(None)]
    assert ids[:5] == ["E1", "E2", "E3", "E4", "E5"]
    assert len(set(ids)) == len(EXPERIMENTS) == len(ids)
    assert [e.id for e in select(["e3", " E1"])] == ["E1", "E3"]
    with pytest.raises(ValueError, match=r"unknown experiment id\(s\) E99; known: E1, E2"):
        select(["E1", "E99"])


def test_claim_rows_name_the_experiments_that_cast_no_vote(tmp_path):
    from implicit_em.report.page import render_html
    from implicit_em.report.render import render_markdown

    entries = [_entry("E4", "invalid", ("C10", "met", "supports"))]
    document = {
        "meta": {
            "size": "quick",
            "date": "today",
            "machine": "here",
            "version": "0",
            "seconds": 0.0,
            "compared_with": None,
        },
        "claims": {"C10": "a claim"},
        "claim_verdicts": claim_verdicts(["C10"], entries),
        "experiments": [],
    }
    rows = [line for line in render_markdown(document).splitlines() if line.startswith("| C10")]
    assert "**not tested**" in rows[0] and "open" in rows[0]  # the short verdict table
    assert "E4 invalid (its criteria are not read)" in rows[1]  # the numbers behind it
    assert "E4 invalid (its criteria are not read)" in render_html(document, tmp_path)


def test_an_item_is_exploratory_when_its_primary_experiment_is(tmp_path):
    from implicit_em.report.page import render_html
    from implicit_em.report.readme import full_size_column
    from implicit_em.report.render import render_markdown, report_document

    amended = {
        **_entry("E7", "holds", ("C6", "met", "supports"), ("C8", "met", "supports", False)),
        "exploratory": True,
    }
    clean = {
        **_entry("E4", "holds", ("C8", "met", "supports"), gates=(("err", True, "C1"),)),
        "exploratory": False,
    }
    amended_gate = {**_entry("E1", "holds", gates=(("err", True, "C2"),)), "exploratory": True}
    items = ["C6", "C8", "C1", "C2"]
    got = {c["id"]: c for c in claim_verdicts(items, [amended, clean, amended_gate])}
    assert got["C6"]["exploratory"]  # its primary's experiment was amended after data
    assert not got["C8"]["exploratory"]  # only a secondary criterion's experiment was
    assert not got["C1"]["exploratory"] and not got["C2"]["exploratory"]  # algebra, not seeds
    meta = {"size": "quick", "date": "today", "machine": "here", "version": "0", "seconds": 0.0}
    full = {
        "meta": {**meta, "size": "full", "publication": None},
        "experiments": [{"id": "E7", "verdict": "holds", "exploratory": True}],
        "claim_verdicts": [{"id": "C6", "verdict": "supported", "exploratory": True}],
    }
    document = report_document([], meta, full)
    document["claim_verdicts"] = [
        {**c, "full_verdict": "supported", "full_exploratory": c["id"] == "C6"}
        for c in got.values()
    ]
    rows: dict[str, str] = {}  # the first row of each item: the short verdict table's
    for line in render_markdown(document).splitlines():
        if line.startswith("| "):
            rows.setdefault(line.split("|")[1].strip(), line)
    assert "**supported** (exploratory) | **supported** (exploratory) |" in rows["C6"]
    assert "(exploratory)" not in rows["C8"] and "(exploratory)" not in rows["C1"]
    assert render_html(document, tmp_path).count("</span> (exploratory)") == 1  # C6's row
    readme = "\n".join(
        [
            "Size quick: no full run published; verdicts here are not checked against one.",
            "",
            "| item | statement | verdict | full size | for or against the paper |",
            "|---|---|---|---|---|",
            "| C6 | a claim | **supported** | not published | for the paper |",
        ]
    )
    assert "| **supported** (exploratory) |" in full_size_column(readme, full)


def test_items_are_coloured_by_what_their_verdict_says_of_the_paper():
    from implicit_em.report.claims import CLAIMS, FAVOURS_PAPER, direction

    assert set(FAVOURS_PAPER) == set(CLAIMS)
    assert direction("C4", "supported") == "for the paper"
    assert direction("C4", "refuted") == "against the paper"
    assert direction("R1", "stands") == "against the paper"
    assert direction("R1", "answered") == "for the paper"
    assert direction("T1", "supported") == "against the paper"  # normalization not needed
    assert direction("T3", "supported") == "for the paper"
    assert direction("C1", "verified (algebra)") == "for the paper"
    assert direction("R4", "verified (algebra)") == "against the paper"
    for verdict in ("mixed", "inconclusive", "not tested"):
        assert direction("C6", verdict) == "open"

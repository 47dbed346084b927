"""The answers table's cells: the answer for every kind of verdict, the deciding criterion, the
rival, and the legend that states each rule once."""

from __future__ import annotations

import pytest

from implicit_em.report.items.forms import FORMS
from implicit_em.report.items.registry import RULES
from implicit_em.report.rendering.answers import (
    COLUMNS,
    EXPLORATORY,
    answer,
    answer_rows,
    deciding_cell,
    deciding_criterion,
    gist,
    html_table,
    markdown_table,
    rival_cell,
)
from implicit_em.report.rendering.legend import legend, legend_html, legend_markdown
from implicit_em.report.rules.claims import CLAIMS


def _criterion(number: str, vote: str, status: str, **marks) -> dict:
    return {
        "experiment": "E2",
        "number": number,
        "estimate": 0.3,
        "low": 0.2,
        "high": 0.4,
        "op": ">=",
        "threshold": 0.1,
        "status": status,
        "vote": vote,
        "standing": "counted",
        "negative_control": {"kind": "realistic", "removes": "EM's direction: Adam (trained)"},
        **marks,
    }


def _item(ident: str, verdict: str, qualifier: str = "", **more) -> dict:
    return {"id": ident, "verdict": verdict, "qualifier": qualifier, "parts": [], **more}


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (_item("C5", "supported"), "for the paper"),
        (_item("C2", "refuted"), "against it"),
        (_item("R1", "stands"), "against it"),
        (_item("R1", "answered"), "for the paper"),
        (_item("T1", "supported"), "against it"),  # T1 holding would tell against the paper
        (_item("T3", "supported"), "for the paper"),
        (_item("C1", "verified (algebra)"), "for the paper"),
        (_item("R4", "verified (algebra)"), "against it"),
        (_item("C1", "violated (algebra)"), "against it"),
        (_item("m3", "stands", "by reading"), "against it"),
        (_item("C6", "inconclusive", "interval straddles"), "open: interval straddles"),
        (_item("C11", "inconclusive", "not converged"), "open: not converged"),
        (_item("C4", "mixed"), "open: mixed"),
        (_item("C12", "not tested"), "open: not tested"),
        (_item("C12", "not tested", "not measured"), "open: not tested: not measured"),
        (
            _item(
                "C12",
                "not tested",
                "excluded",
                excluded=[{"experiment": "E12", "verdict": "not run"}],
            ),
            "open: not tested: E12 not run",
        ),
        (
            _item(
                "C9",
                "inconclusive",
                "excluded, interval straddles",
                excluded=[{"experiment": "E19", "verdict": "invalid"}],
            ),
            "open: E19 invalid, interval straddles",
        ),
        (
            _item("C10", "fragile", "under near alone: inconclusive", fragile_under=["near alone"]),
            "open: fragile under near alone",
        ),
        (
            _item("C11", "inconsistent", links=[{"with": "T1", "contradicts": True}]),
            "open: contradicts T1",
        ),
        (_item("C5", "supported", exploratory=True), "for the paper" + EXPLORATORY),
    ],
)
def test_every_kind_of_verdict_has_its_answer(item, expected):
    assert answer(item) == expected


def test_the_deciding_criterion_casts_the_verdicts_vote_primary_first_then_nearest():
    near = _criterion("near", "for", "met", low=0.11)
    far = _criterion("far", "for", "met", low=0.9, high=1.0)
    against = _criterion("against", "against", "not met")
    beside = _criterion("beside", "for", "met", primary=True)
    parts = [
        {"id": "a", "criteria": [far, near, against], "gates": []},
        {"id": "b", "criteria": [beside], "gates": [], "beside": "a finding"},
    ]
    item = _item("C5", "supported", parts=parts, decided_by=["a", "b"])
    assert deciding_criterion(item) is near  # the verdict's vote; nearest its threshold
    primary = _criterion("primary", "for", "met", primary=True, low=0.9, high=1.0)
    parts[0]["criteria"].append(primary)
    assert deciding_criterion(item) is primary  # the registered primary first
    refuted = _item("C2", "refuted", parts=parts, decided_by=["a"])
    assert deciding_criterion(refuted) is against
    undecided = _item("C2", "fragile", reading="refuted", parts=parts, decided_by=["a"])
    assert deciding_criterion(undecided) is against  # the rule's reading, before fragility
    assert deciding_criterion(_item("C2", "refuted", parts=parts, decided_by=["b"])) is None


def test_the_deciding_cell_reads_the_number_or_how_the_item_is_decided():
    c = _criterion("gd_path_gap", "against", "not met", estimate=0.6721, low=0.468, high=0.876)
    c.update(op="<=", threshold=0.05)
    parts = [{"id": "a", "criteria": [c], "gates": []}]
    item = _item("C2", "refuted", parts=parts, decided_by=["a"])
    assert deciding_cell(item) == "E2 gd_path_gap 0.67 [0.47, 0.88], needs ≤ 0.05"
    assert rival_cell(item) == "no better than a rival without EM's direction"
    identity = _item("C1", "verified (algebra)", form="identity")
    assert deciding_cell(identity) == "identity (algebra)"
    gates = [{"id": "all", "criteria": [], "gates": [{"experiment": "E1", "name": "g"}]}]
    sufficiency = _item("C3", "verified (algebra)", form="sufficiency", parts=gates)
    sufficiency["decided_by"] = ["all"]
    assert deciding_cell(sufficiency) == "algebra (gates of E1)"
    assert deciding_cell(_item("m3", "stands", "by reading")) == "by reading the text"
    assert deciding_cell(_item("C12", "not tested", "excluded")) == "—"
    assert rival_cell(_item("C12", "not tested", "excluded")) == "—"


@pytest.mark.parametrize(
    ("status", "vote", "said"),
    [
        ("met", "for", "beat a rival without EM's direction"),
        ("not met", "against", "no better than a rival without EM's direction"),
        ("undecided", "undecided", "vs a rival without EM's direction"),
        ("not met", "undecided", "vs a rival without EM's direction"),  # held open
    ],
)
def test_the_rival_cell_sets_the_measurement_beside_its_rival(status, vote, said):
    parts = [{"id": "a", "criteria": [_criterion("x", vote, status)], "gates": []}]
    verdict = {"for": "supported", "against": "refuted", "undecided": "inconclusive"}[vote]
    assert rival_cell(_item("C5", verdict, parts=parts, decided_by=["a"])) == said


def test_a_trivial_negative_control_is_no_rival():
    c = _criterion("x", "for", "met", negative_control={"kind": "trivial", "why": "untrained"})
    item = _item("C5", "supported", parts=[{"id": "a", "criteria": [c], "gates": []}])
    item["decided_by"] = ["a"]
    assert rival_cell(item) == "—"


def test_every_item_has_a_short_gist_and_the_table_escapes_its_cells():
    assert all(0 < len(gist(i).split()) <= 9 for i in CLAIMS)
    rows = answer_rows([_item("C6", "inconclusive", "a | b")])
    lines = markdown_table(rows)
    assert lines[0] == "| " + " | ".join(COLUMNS) + " |"
    assert lines[2].count(" | ") == len(COLUMNS) - 1 and "a \\| b" in lines[2]
    html = html_table(answer_rows([_item("C6", "inconclusive", "<b>")]))
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert "<a href='#claim-C6'>C6</a>" in html


def test_the_legend_states_each_rule_once():
    entries = legend(
        [
            _item(
                "C2",
                "refuted",
                exploratory=True,
                exploratory_reason=("E2 was measured before the item rules were registered"),
            )
        ]
    )
    text = "\n".join(legend_markdown(entries))
    for rule in [*FORMS.values(), RULES["all"]]:
        assert text.count(rule) == 1
    assert "In this run E2 was measured before the item rules" in text
    assert legend_html(entries).count("<dt>") == len(entries)
    page = legend([], blocks=False)  # the report page has no blocks
    assert [t for t, _ in page] == [t for t, _ in legend([])][:-1]

"""The theory page and the report guide cover every claim and every registered experiment."""

from __future__ import annotations

import re
from pathlib import Path

from implicit_em.report import CLAIMS, select

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_experiment_tests_known_claims_and_has_a_guide_section():
    guide = (DOCS / "report.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^### (E\d+) ", guide, flags=re.M))
    for experiment in select(None):
        assert set(experiment.claims) <= set(CLAIMS), experiment.id
        assert experiment.id in headings, f"docs/report.md has no section for {experiment.id}"


def test_theory_page_states_and_places_every_claim():
    theory = (DOCS / "theory.md").read_text(encoding="utf-8")
    table = theory.split("## Where each item is checked", 1)[1]
    for claim in CLAIMS:
        assert re.search(rf"\*\*{claim}[. ]", theory), f"{claim} is not stated"
        assert re.search(rf"^\| {claim} \|", table, flags=re.M), f"{claim} is not in the table"


def test_theory_links_point_at_guide_sections():
    theory = (DOCS / "theory.md").read_text(encoding="utf-8")
    guide = (DOCS / "report.md").read_text(encoding="utf-8")
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).strip().replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", guide, flags=re.M)
    }
    for anchor in re.findall(r"\(report\.md#([^)]+)\)", theory):
        assert anchor in anchors, f"docs/theory.md links to a missing section #{anchor}"


def test_guide_lists_every_gate_and_how_each_criterion_could_have_failed():
    guide = (DOCS / "report.md").read_text(encoding="utf-8")
    for experiment in select(None):
        section = guide.split(f"### {experiment.id} ", 1)[1].split("\n### ", 1)[0]
        for gate in experiment.rule.gates:
            assert f"Gate: `{gate.number} " in section, (experiment.id, gate.number)
        for criterion in experiment.rule.criteria:
            assert criterion.how_it_could_fail in section, (experiment.id, criterion.number)


def test_the_theory_page_lists_where_each_item_is_checked_as_registered():
    from implicit_em.report.items.table import check_page, items_table, with_table

    page = Path(__file__).resolve().parents[2] / "docs" / "theory.md"
    assert check_page(page), (
        "docs/theory.md's items table differs from items.json: write it with "
        "`python -m implicit_em.report.items.table docs/theory.md`"
    )
    table = items_table()
    assert table.count("\n| C11 |") == 1 and "`E11:sigmoid_minus_ce_bits` (refutes)" in table
    edited = with_table(
        "a\n<!-- items table: written from report/protocols/items.json -->\nSTALE-ROW\n"
        "<!-- end of items table -->\nb"
    )
    assert "STALE-ROW" not in edited and table in edited

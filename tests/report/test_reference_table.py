"""The wind tunnel's side-by-side table: written from the published run, and kept in step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from implicit_em.report.experiments._reference_budget import ARM_COLUMNS
from implicit_em.report.rendering.reference_table import (
    BEGIN,
    END,
    reference_table,
    with_table,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "windtunnel.md"
PUBLISHED = ROOT / "results" / "full" / "results.json"
QUICK = ROOT / "results" / "quick" / "results.json"


def test_the_committed_block_is_what_the_published_run_says():
    text = PAGE.read_text(encoding="utf-8")
    assert text == with_table(text, json.loads(PUBLISHED.read_text())), (
        "docs/windtunnel.md's reference table is out of date: python -m "
        "implicit_em.report.rendering.reference_table docs/windtunnel.md results/full/results.json"
    )


def _rows(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.startswith("| ") and "---" not in line]


def _without_arms(document: dict) -> dict:
    """`document` with E10's reference-budget arms' table taken out (a report that did not run
    them)."""
    e10 = next(e for e in document["experiments"] if e["id"] == "E10")
    e10["tables"] = [t for t in e10["tables"] if not (t["columns"] and t["columns"][0] == "arm")]
    return document


def test_a_run_on_the_reference_tasks_is_set_beside_the_reference():
    """Without reference-budget arms, the 10-seed table's figures come out beside the
    reference's for the same quantity on the same kind of data, and say they do not reach it."""
    document = _without_arms(json.loads(QUICK.read_text()))
    block = reference_table(document)
    rows = _rows(block)
    assert rows[1].startswith("| bijection | transformer | entropy error | 0.007 (held-out; ")
    e10 = next(e for e in document["experiments"] if e["id"] == "E10")
    first = e10["tables"][0]["rows"][0]
    assert f"| {first[4]} (10-seed size;" in rows[1]  # the entropy error as measured
    assert "no reference-budget arms" in block
    # the HMM's 7.5e-5 is a training-set KL: never compared with a held-out figure
    (training,) = [r for r in rows if "7.5e-05 (training set" in r]
    assert training.endswith("| not comparable (a training-set figure) |")
    assert any(r.startswith("| HMM filter | transformer | KL | 0.012 (held-out;") for r in rows)


def _with_arms(document: dict, mae: str) -> dict:
    e10 = next(e for e in _without_arms(document)["experiments"] if e["id"] == "E10")
    columns = list(ARM_COLUMNS)
    row = ["bijection-2x64", "bijection", "transformer", "2 × 64", 106068, "100,000 × 128"]
    row += ["1", "0.002 [0.001, 0.003]", mae, "3/3 (≤ 0.01%)", "1.9"]
    e10["tables"].append({"title": "arms", "columns": columns, "rows": [row]})
    return document


def test_the_reference_budget_arms_are_read_and_judged_plainly():
    reached = reference_table(_with_arms(json.loads(QUICK.read_text()), "0.005 [0.004, 0.006]"))
    (row,) = [r for r in _rows(reached) if "reference-budget arm bijection-2x64" in r]
    assert "100,000 × 128, 1.9 h" in row and row.endswith("| reached |")
    short = reference_table(_with_arms(json.loads(QUICK.read_text()), "0.014 [0.012, 0.016]"))
    (row,) = [r for r in _rows(short) if "reference-budget arm bijection-2x64" in r]
    assert row.endswith("| not reached (2× the reference's) |")
    assert "Ours come from the reference-budget arms" in short


def test_a_run_on_other_tasks_says_it_has_nothing_to_set_beside():
    document = json.loads(QUICK.read_text())
    e10 = next(e for e in document["experiments"] if e["id"] == "E10")
    e10["config"]["tasks"]["bijection"] = {"n_symbols": 4, "n_pairs": 3, "replacement": False}
    block = reference_table(document)
    assert block.startswith("The published full run's wind tunnel did not run the reference's")
    assert "bijection n_symbols = 4, n_pairs = 3" in block and "|" not in block


def test_a_page_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="no '<!-- reference table"):
        with_table("# a page\n", {"experiments": []})
    assert with_table(f"a\n{BEGIN}\nold\n{END}\nb", {"experiments": []}).count("old") == 0

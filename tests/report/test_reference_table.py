"""The wind tunnel's side-by-side table: written from the published run, and kept in step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_a_run_on_the_reference_tasks_is_set_beside_the_reference():
    """The quick report runs the reference's task sizes (a smaller budget): its E10 arms come
    out beside the published numbers, one row per task and model, in both metrics."""
    document = json.loads(QUICK.read_text())
    block = reference_table(document)
    rows = [line for line in block.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 9  # header, 3 tasks x 3 models
    assert rows[1].startswith("| bijection | transformer | 0.007 | ")
    assert "| HMM filter | transformer | about 7.5e-5 | " in block
    assert "| bijection | prefix MLP | not reported | " in block
    e10 = next(e for e in document["experiments"] if e["id"] == "E10")
    first = e10["tables"][0]["rows"][0]
    assert f"| {first[4]} | {first[3]} |" in rows[1]  # entropy error, then KL, as measured


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

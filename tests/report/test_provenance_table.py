"""docs/results-full.md's provenance table: written from the published run, and kept in step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from implicit_em.report.rendering.provenance_table import (
    provenance_table,
    seed_ranges,
    with_table,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results-full.md"
PUBLISHED = ROOT / "results" / "full" / "results.json"


def _entry(ident: str, seeds: list[int], units: dict | None) -> dict:
    return {
        "id": ident,
        "config": {"seeds": seeds},
        "protocol": {"registered": "2026-12-07 01:27:50 UTC"},
        "started": "2026-12-07 01:38:34 UTC",
        "units": units,
    }


def _units(count: int, seconds: float, cpu: float | None, machine: str) -> dict:
    return {
        "count": count,
        "seconds": seconds,
        "longest": "a-seed1",
        "longest_seconds": seconds / count,
        "cpu_units": count if cpu is not None else 0,
        "cpu_seconds": cpu,
        "cpu_hours": None if cpu is None else cpu / 3600,
        "machines": [machine],
    }


def test_the_committed_table_is_what_the_published_run_says():
    text = PAGE.read_text(encoding="utf-8")
    assert text == with_table(text, json.loads(PUBLISHED.read_text())), (
        "docs/results-full.md's provenance table is out of date: python -m "
        "implicit_em.report.rendering.provenance_table docs/results-full.md "
        "results/full/results.json"
    )


def test_each_experiment_is_a_row_and_the_totals_add_up():
    document = {
        "experiments": [
            _entry("E1", [31000, 31001, 31002], _units(3, 90.0, 7200.0, "machine A")),
            _entry("E2", [5, 6, 9], _units(2, 7300.0, None, "machine B")),
            _entry("E3", [1], None),
        ]
    }
    table = provenance_table(document)
    rows = table.splitlines()
    assert rows[2] == (
        "| E1 | 3 (31000–31002) | 2026-12-07 01:27:50 UTC | 2026-12-07 01:38:34 UTC | 3 | "
        "2 min | 2.000 | a-seed1 (30 s) | 1 |"
    )
    assert rows[3].startswith("| E2 | 3 (5–6, 9) | ") and "| 2.0 h | not recorded |" in rows[3]
    assert rows[4].endswith("| not recorded | not recorded | not recorded | not recorded |")
    assert (
        "In all: 5 units of work (CPU time not recorded for 2 of them), 2.1 h of unit wall "
        "time and 2.00 CPU-hours; 1 experiment(s) recorded no units." in table
    )
    assert table.endswith("Machine lines:\n\n1. machine A\n2. machine B")


def test_a_run_from_before_the_unit_records_says_so_and_never_zero():
    table = provenance_table({"experiments": [_entry("E1", [1000], None)]})
    assert "The run recorded no units of work (it predates their records)." in table
    assert " 0.00 " not in table


@pytest.mark.parametrize(
    ("seeds", "ranges"),
    [([3, 1, 2, 2], "1–3"), ([9300, 31000, 9301], "9300–9301, 31000"), ([], "")],
)
def test_seeds_read_as_runs_of_consecutive_integers(seeds, ranges):
    assert seed_ranges(seeds) == ranges

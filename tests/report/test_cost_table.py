"""docs/windtunnel.md's measured cost of the wind tunnel: written from the published run's unit
records, and kept in step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from implicit_em.report.rendering.cost_table import cost_table, unit_kind, with_table

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "windtunnel.md"
PUBLISHED = ROOT / "results" / "full" / "results.json"
QUICK = ROOT / "results" / "quick" / "results.json"


def _entry(ident: str, each: dict[str, tuple[float, float | None]], machine: str) -> dict:
    return {
        "id": ident,
        "units": {
            "count": len(each),
            "machines": [machine],
            "each": {
                name: {"seconds": wall, "cpu_seconds": cpu, "host": "vm", "device": "cpu"}
                for name, (wall, cpu) in each.items()
            },
        },
    }


def test_the_committed_block_is_what_the_published_run_says():
    text = PAGE.read_text(encoding="utf-8")
    assert text == with_table(text, json.loads(PUBLISHED.read_text())), (
        "docs/windtunnel.md's cost table is out of date: python -m "
        "implicit_em.report.rendering.cost_table docs/windtunnel.md results/full/results.json"
    )


@pytest.mark.parametrize(
    ("name", "kind"),
    [("hmm-seed9107", "hmm"), ("interventions-seed-3", "interventions"), ("sticky", "sticky")],
)
def test_a_units_kind_is_its_name_without_the_seed(name, kind):
    assert unit_kind(name) == kind


def test_one_row_per_experiment_and_kind_with_median_range_and_totals():
    document = {
        "meta": {"size": "full", "date": "2026-12-07 03:54 UTC"},
        "experiments": [
            _entry("E1", {"a-seed1": (5.0, 5.0)}, "machine Z"),  # not the wind tunnel
            _entry(
                "E10",
                {
                    "hmm-seed1": (300.0, 540.0),
                    "hmm-seed2": (600.0, 660.0),
                    "hmm-seed3": (360.0, 600.0),
                    "dice-seed1": (90.0, 170.0),
                },
                "machine A",
            ),
            _entry("E11", {"objectives-seed1": (400.0, None)}, "machine B"),
        ],
    }
    block = cost_table(document)
    rows = [line for line in block.splitlines() if line.startswith("| E")]
    assert rows == [
        "| E10 | hmm | 3 | 600 (540–660) | 360 (300–600) | 0.50 |",
        "| E10 | dice | 1 | 170 | 90 | 0.05 |",
        "| E11 | objectives | 1 | not recorded | 400 | not recorded |",
    ]
    assert (
        "In all: 5 units, 0.55 CPU-hours and 0.49 h of unit wall time. "
        "No units recorded for E12." in block
    )
    assert block.endswith("Machine lines:\n\n1. machine A\n2. machine B")
    assert "machine Z" not in block


def test_a_run_without_unit_records_says_so_and_never_zero():
    document = {"experiments": [{"id": "E10", "units": None}, {"id": "E11"}]}
    block = cost_table(document)
    assert "recorded no units of work for the wind tunnel" in block
    assert "0.00" not in block and "|" not in block


def test_the_quick_report_reads_every_wind_tunnel_experiment():
    """The quick report recorded its units: every one of E10–E12's appears, none is lost."""
    document = json.loads(QUICK.read_text())
    block = cost_table(document)
    expected = sum(
        len(e["units"]["each"]) for e in document["experiments"] if e["id"] in {"E10", "E11", "E12"}
    )
    assert expected > 0
    assert f"In all: {expected} units, " in block
    assert "No units recorded" not in block

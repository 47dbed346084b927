"""docs/report.md's list of registered protocol versions: written from the registry, in step."""

from __future__ import annotations

from pathlib import Path

import pytest

from implicit_em.report.rendering.protocol_history import history_lines, with_history

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "report.md"


def test_the_committed_list_is_what_the_registry_says():
    text = PAGE.read_text(encoding="utf-8")
    assert text == with_history(text), (
        "docs/report.md's protocol versions are out of date: "
        "python -m implicit_em.report.rendering.protocol_history docs/report.md"
    )


def test_one_bullet_per_event_with_its_experiments_reason_and_what_was_seen():
    registry = {
        "E1": {
            "versions": [
                {"hash": "a", "registered": "2026-01-01 00:00:00 UTC", "amendment": None},
                {
                    "hash": "b",
                    "registered": "2026-01-02 00:00:00 UTC",
                    "amendment": {
                        "reason": "a threshold moved.",
                        "after_data": True,
                        "seen": "the quick numbers",
                        "seeds_seen": [0, 1, 2, 7],
                    },
                },
            ]
        },
        "E10": {
            "versions": [
                {"hash": "c", "registered": "2026-01-01 00:00:00 UTC", "amendment": None},
                {
                    "hash": "d",
                    "registered": "2026-01-03 00:00:00 UTC",
                    "amendment": {"reason": "new seeds", "after_data": False, "seen": ""},
                },
            ]
        },
    }
    assert history_lines(registry) == [
        "- **2026-01-01 00:00:00 UTC** (E1, E10): registered.",
        "- **2026-01-02 00:00:00 UTC** (E1): a threshold moved. After data (seeds 0–2, 7): "
        "the quick numbers.",
        "- **2026-01-03 00:00:00 UTC** (E10): new seeds. Before any data it bears on.",
    ]


def test_a_page_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="no '<!-- protocol versions"):
        with_history("# a page\n", {})

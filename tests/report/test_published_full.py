"""The repository's published full-size report: fresh against the current source, and the
README's "full size" column is what it says.

Both tests read the committed `results/full/`. The freshness check itself is tested both ways on
synthetic publications in `test_publish.py`; the README filler is tested both ways here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from implicit_em.report.publishing.freshness import published_document, stale_experiments
from implicit_em.report.publishing.superseded import read_superseded, uncovered
from implicit_em.report.rendering.readme import full_size_column
from implicit_em.report.rendering.render import NO_FULL_RUN

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "results" / "full"
README = ROOT / "README.md"


def test_every_published_experiment_is_keyed_and_matches_the_current_source():
    """Every published experiment matches the current code, protocols, data and library
    versions (one published before the measurement keys is stale too: `freshness.LEGACY`),
    or was already stale when the publication was marked superseded awaiting its rerun."""
    document = published_document(PUBLISHED)
    if document is None:
        pytest.skip(NO_FULL_RUN)
    stale = stale_experiments(document)
    record = read_superseded(PUBLISHED)
    beyond = uncovered(record, [s.id for s in stale])
    assert not beyond, "results/full is stale:\n" + "\n".join(
        str(s) for s in stale if s.id in beyond
    )


def test_the_readme_full_size_column_is_what_results_full_says():
    text = README.read_text(encoding="utf-8")
    expected = full_size_column(text, published_document(PUBLISHED))
    assert text == expected, (
        "README.md's full-size column differs from results/full: publish again with "
        "`implicit-em publish --from <the full report folder>`, which fills it"
    )


_README = """Intro.

Size quick: no full run published; verdicts here are not checked against one.

| item | verdict | full size | experiments | numbers |
|---|---|---|---|---|
| C4 | **mixed** | not published | E2, E3 | a \\| b |
| C5 | **refuted** | not published | E1 | c |

| claims | experiment | verdict | full size | key numbers |
|---|---|---|---|---|
| C4 | E2: Trajectories: GD against EM | **fails** | not published | x = 1 |
| C4 | E3: Fixed points | **inconclusive** | not published | y = 2 |
"""


def _full() -> dict:
    return {
        "meta": {
            "size": "full",
            "date": "2026-12-03 01:00 UTC",
            "version": "0.1",
            "machine": "a 2-core machine",
            "publication": {
                "date": "2026-12-03 02:00 UTC",
                "partial": True,
                "gaps": ["E3 not in the run"],
            },
        },
        "claim_verdicts": [{"id": "C4", "verdict": "supported"}],
        "experiments": [{"id": "E2", "verdict": "holds"}],
    }


def test_the_full_size_column_is_filled_from_a_publication_and_emptied_without_one():
    filled = full_size_column(_README, _full())
    assert "| C4 | **mixed** | **supported** | E2, E3 | a \\| b |" in filled
    assert "| C5 | **refuted** | not in the full run | E1 | c |" in filled
    assert "| E2: Trajectories: GD against EM | **fails** | **holds** | x = 1 |" in filled
    assert "| E3: Fixed points | **inconclusive** | not in the full run | y = 2 |" in filled
    line = next(x for x in filled.splitlines() if x.startswith("Size quick"))
    assert "published full run of 2026-12-03 01:00 UTC on a 2-core machine" in line
    assert "PARTIAL run: E3 not in the run" in line
    assert full_size_column(filled, None) == _README


def test_a_readme_without_the_claim_tables_is_refused():
    with pytest.raises(ValueError, match="no claim table to fill"):
        full_size_column("# A README\n\nNo table here.\n", None)
    without_column = _README.replace(" full size |", " other |")
    with pytest.raises(ValueError, match="no claim table to fill"):
        full_size_column(without_column, _full())

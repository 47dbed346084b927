"""docs/report.md's gates and criteria: written from the registered protocols, and kept in step."""

from __future__ import annotations

from pathlib import Path

import pytest

from implicit_em.report.rendering.protocol_lines import experiment_lines, with_lines
from implicit_em.report.running.registry import select

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "report.md"


def test_the_committed_page_lists_what_the_protocols_say():
    text = PAGE.read_text(encoding="utf-8")
    assert text == with_lines(text), (
        "docs/report.md's gates and criteria are out of date: "
        "python -m implicit_em.report.rendering.protocol_lines docs/report.md"
    )


def test_a_line_says_the_protocols_method_threshold_and_negative_control():
    (e5,) = select(["E5"])
    lines = [line for block in experiment_lines(e5) for line in block]
    share = next(line for line in lines if "`no_volume_alarm_share >= 0.5`" in line)
    assert share.startswith("- Criterion (C14d, supports; clopper-pearson): ")
    assert "Controls: positive: " in lines[lines.index(share) + 1]
    assert "negative (realistic): " in lines[lines.index(share) + 1]
    (e10,) = select(["E10"])
    lines = [line for block in experiment_lines(e10) for line in block]
    assert (
        "    - Read on its item only where `unconverged_runs <= 0`, else *not converged*." in lines
    )


def test_a_rewrite_keeps_a_hand_note_under_its_criterion_and_drops_stale_lines():
    (e5,) = select(["E5"])
    old = [
        "# Guide",
        "### E5 Volume",
        "Prose.",
        "",
        "- Gate: `no_volume_log_det_drop >= 2` (stale).",
        "- Criterion (C9, supports; wilson): `volume_reaches_em_share >= 0.5` (stale).",
        "    - Controls: stale.",
        "    - At quick size: 5 of 5.",
        "",
        "More prose.",
        "## Next",
    ]
    new = with_lines("\n".join(old), [e5]).split("\n")
    assert new[:4] == old[:4] and new[-3:] == old[-3:]
    assert not any("stale" in line for line in new)
    reach = next(i for i, line in enumerate(new) if "`volume_reaches_em_share" in line)
    assert new[reach + 2] == "    - At quick size: 5 of 5."  # after its generated Controls line
    assert sum(line.startswith("- Criterion (") for line in new) == len(e5.protocol.criteria)


def test_a_note_under_a_number_the_protocol_lacks_is_refused():
    (e5,) = select(["E5"])
    text = "### E5 V\n- Criterion (C9, supports; t): `no_such_number >= 1` (x).\n    - A note.\n"
    with pytest.raises(ValueError, match="notes under unknown numbers"):
        with_lines(text, [e5])

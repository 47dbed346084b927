"""The commands that write a block of a page from a report's results.json
(`python -m implicit_em.report.rendering.<module> PAGE RESULTS`): a bad call is one `error:` line
and exit 2, and the page is left as it was."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "results" / "full" / "results.json"

WRITERS = ("cost_table", "provenance_table", "reference_table")


@pytest.mark.parametrize("name", WRITERS)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, name):
    module = f"implicit_em.report.rendering.{name}"
    writer = importlib.import_module(module)
    marked = f"{writer.BEGIN}\n{writer.END}\n"
    bare, page = tmp_path / "bare.md", tmp_path / "page.md"
    bare.write_text("no markers\n")
    page.write_text(marked)
    garbled = tmp_path / "r.json"
    garbled.write_text("not json")
    calls = (
        [str(page)],  # RESULTS missing
        [str(page), str(PUBLISHED), "extra"],
        [str(bare), str(PUBLISHED)],  # a page without the markers
        [str(page), str(garbled)],
        [str(page), str(tmp_path / "absent.json")],
    )
    for args in calls:
        done = subprocess.run(
            [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT
        )
        assert done.returncode == 2, args
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: "), line
    assert bare.read_text() == "no markers\n"
    assert page.read_text() == marked  # nothing written

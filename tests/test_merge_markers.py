"""No tracked file carries a merge's conflict markers (they hide in docstrings and Markdown,
where neither Python nor the docs build complains)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_MARKER = re.compile(r"^(<{7}|>{7})( |$)|^={7}$", flags=re.M)


def conflict_lines(text: str) -> list[int]:
    """The 1-based line numbers of `text` that are conflict markers (`<<<<<<< `, `=======`,
    `>>>>>>> ` at the start of a line)."""
    return [text.count("\n", 0, m.start()) + 1 for m in _MARKER.finditer(text)]


def test_the_detector_finds_markers_and_nothing_else() -> None:
    text = "a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> branch\n======== not one\n`<<<<<<<` no\n"
    assert conflict_lines(text) == [2, 4, 6]


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False, timeout=60
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    suffixes = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".json", ".html", ""}
    paths = [ROOT / p for p in listed.stdout.decode().split("\0") if p]
    return [p for p in paths if p.suffix in suffixes and p.is_file()]


def test_no_tracked_file_has_conflict_markers() -> None:
    found = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}" for line in conflict_lines(text)]
    assert not found, "conflict markers at " + ", ".join(found)

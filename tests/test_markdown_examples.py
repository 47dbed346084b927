"""Every Python block of README.md and docs/*.md runs as written.

Each block runs in a fresh namespace with an empty working folder, as a reader pasting it would
run it. A block that cannot run here (it needs a GPU, downloaded data or hours) is preceded by
`<!-- example: skip REASON -->`, and is reported as skipped with that reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    r"(?:^<!-- example: skip (?P<reason>.+?) -->\n)?^```python\n(?P<code>.*?)^```",
    flags=re.S | re.M,
)


def _blocks() -> list:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))  # the block's first line, 1-based
            name = f"{page.relative_to(ROOT)}:{line}"
            found.append(pytest.param(page, line, match["code"], match["reason"], id=name))
    return found


BLOCKS = _blocks()


def test_the_pages_show_python_examples():
    pages = {param.values[0].name for param in BLOCKS}
    assert {"README.md", "getting-started.md", "trace.md"} <= pages


@pytest.mark.parametrize(("page", "line", "code", "skip"), BLOCKS)
def test_python_block_runs(page, line, code, skip, tmp_path, monkeypatch):
    if skip:
        pytest.skip(skip)
    monkeypatch.chdir(tmp_path)
    # Blank lines before the code keep the page's line numbers in a traceback.
    exec(compile("\n" * (line - 1) + code, str(page), "exec"), {"__name__": "__example__"})

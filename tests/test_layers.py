"""The package's floors: `pages` imports no other module of the package, and `trace` imports
neither the claims report nor `plot` (which sits above it)."""

from __future__ import annotations

import ast
from pathlib import Path

import implicit_em

SRC = Path(implicit_em.__file__).parent


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_pages_is_a_floor():
    assert not {n for n in _imports(SRC / "pages.py") if n.startswith("implicit_em")}


def test_trace_imports_neither_report_nor_plot():
    wrong = {
        f"{path.relative_to(SRC)}: {name}"
        for path in (SRC / "trace").rglob("*.py")
        for name in _imports(path)
        if name.startswith(("implicit_em.report", "implicit_em.plot"))
    }
    assert not wrong, sorted(wrong)


def test_report_renders_with_pages():
    assert "implicit_em.pages" in _imports(SRC / "report" / "rendering" / "page.py")

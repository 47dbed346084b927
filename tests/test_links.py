"""Every relative link in the README and the docs resolves to a file inside the repository."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOCUMENTS = sorted([ROOT / "README.md", *DOCS.rglob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", flags=re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", flags=re.S)
_INLINE = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(?:<([^>]*)>|([^)\s]+))(?:\s+[\"'(][^)]*)?\)"
)
_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", flags=re.M)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def relative_links(text: str) -> list[str]:
    """The link targets of Markdown `text` that are paths: no URL scheme, no bare `#anchor`.

    Links inside fenced code blocks and code spans are not links.
    """
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = [a or b for a, b in _INLINE.findall(text)] + _DEFINITION.findall(text)
    return [t for t in targets if not _SCHEME.match(t) and not t.startswith("#")]


def test_the_parser_finds_links_and_skips_code() -> None:
    text = (
        '[a](docs/a.md) ![img](b.png "title") [c](https://x.org) [d](#here) [e](<f g.md>)\n'
        "`[not](code.md)`\n```\n[not](fenced.md)\n```\n[ref]: ../up.md\n"
    )
    assert relative_links(text) == ["docs/a.md", "b.png", "f g.md", "../up.md"]


def _problem(document: Path, target: str) -> str | None:
    path = unquote(target.split("#", 1)[0].split("?", 1)[0])
    resolved = (document.parent / path).resolve()
    if not resolved.is_relative_to(ROOT):
        return "outside the repository"
    if document.is_relative_to(DOCS) and not resolved.is_relative_to(DOCS):
        return "outside docs/, so not on the site"
    if not resolved.exists():
        return "no such file"
    return None


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve_inside_the_repository(document: Path) -> None:
    name = document.relative_to(ROOT).as_posix()
    broken = [
        f"{target} ({problem})"
        for target in relative_links(document.read_text(encoding="utf-8"))
        if (problem := _problem(document, target))
    ]
    assert not broken, f"{name}: broken links {broken}"

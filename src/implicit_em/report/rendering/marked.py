"""Pages that carry a block written from data between two marker lines, and the small command
that rewrites such a page (`python -m implicit_em.report.rendering.<module> PAGE [DATA]`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.report.publishing.freshness import read_document

__all__ = ["between", "rewrite_block", "rewrite_page"]


def between(text: str, begin: str, end: str, body: str) -> str:
    """`text` with what lies between its `begin` and `end` lines replaced by `body`
    (`ValueError` when the markers are missing)."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"the page has no {begin!r} ... {end!r} lines")
    return f"{text[: start + len(begin)]}\n{body}\n{text[stop:]}"


def rewrite_page(
    argv: Sequence[str], usage: str, rewrite: Callable[[str, Sequence[str]], str]
) -> int:
    """Rewrite the page `argv[0]` as `rewrite(its text, argv[1:])` gives it: exit status 0, or
    2 with one `error:` line (wrong arguments, per `usage`; a file that cannot be read; a page
    or document that is not what was expected), the page left as it was."""
    names = usage.split()
    if len(argv) != len(names):
        print(f"error: expected {usage}", file=sys.stderr)
        return 2
    page = Path(argv[0])
    try:
        text = rewrite(page.read_text(encoding="utf-8"), list(argv[1:]))
    except (OSError, ValueError) as err:
        print(f"error: {page}: {err}", file=sys.stderr)
        return 2
    page.write_text(text, encoding="utf-8")
    return 0


def rewrite_block(argv: Sequence[str], with_block: Callable[[str, Mapping[str, Any]], str]) -> int:
    """`PAGE RESULTS`: rewrite the page as `with_block(its text, the report document RESULTS)`
    gives it, as `rewrite_page` does."""
    return rewrite_page(
        argv, "PAGE RESULTS", lambda text, args: with_block(text, read_document(args[0]))
    )

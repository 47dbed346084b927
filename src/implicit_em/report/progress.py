"""Progress for the report's console: bars on a terminal, plain lines elsewhere.

A progress bar redraws itself with carriage returns and cursor movements; in a log file or a
pipe those are noise. So bars are drawn only when standard error (where they go) is a
terminal (`on_terminal`); elsewhere the report prints one plain line per experiment and
nothing per inner step.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["on_terminal", "progress"]

T = TypeVar("T")


def on_terminal() -> bool:
    """Whether standard error, where progress bars go, is a terminal."""
    return sys.stderr.isatty()


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """Yield `items` under a progress bar that disappears when done (on a terminal only)."""
    yield from tqdm(
        items, desc=desc, total=total, leave=False, dynamic_ncols=True, disable=not on_terminal()
    )

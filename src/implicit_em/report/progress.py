"""A progress bar for an experiment's inner loops (seeds, steps), on standard error."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["progress"]

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """Yield `items` under a progress bar that disappears when done."""
    yield from tqdm(items, desc=desc, total=total, leave=False, dynamic_ncols=True)

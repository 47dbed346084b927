"""Progress for the report's console: bars on a terminal, plain lines elsewhere.

A progress bar redraws itself with carriage returns and cursor movements; in a log file or a
pipe those are noise. So bars are drawn only when standard error (where they go) is a
terminal (`on_terminal`); elsewhere the report prints one plain line per experiment, and a
plain progress line of the whole run (`RunProgress`) at most once a minute.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["RunProgress", "duration", "on_terminal", "progress"]

T = TypeVar("T")


def on_terminal() -> bool:
    """Whether standard error, where progress bars go, is a terminal."""
    return sys.stderr.isatty()


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """Yield `items` under a progress bar that disappears when done (on a terminal only)."""
    yield from tqdm(
        items, desc=desc, total=total, leave=False, dynamic_ncols=True, disable=not on_terminal()
    )


class RunProgress:
    """One progress line for a whole report run: units done of the total, each running
    experiment's units, the workers busy and the time left (given by the driver:
    `implicit_em.report.running.time_left`). On a terminal it is a bar redrawn in place (without
    tqdm's own time left, which reads the pace of all units so far); elsewhere `log` gets it as
    a plain line at most every `every` seconds."""

    def __init__(
        self,
        total: int,
        workers: int,
        log: Callable[[str], None],
        every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.workers, self.done = total, workers, 0
        self._log, self._every, self._clock = log, every, clock
        self._last = clock()
        self._bar = tqdm(
            total=total,
            desc="report",
            unit="unit",
            dynamic_ncols=True,
            disable=not on_terminal(),
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
        )

    def write(self, line: str) -> None:
        """A console line that does not break the bar."""
        if on_terminal():
            self._bar.write(line)
        else:
            self._log(line)

    def line(self, running: Mapping[str, tuple[int, int]], busy: int, left: float) -> str:
        """`units 12/40 (E7 3/10, E8 0/6), 2/2 workers busy, about 3 min left`."""
        parts = ", ".join(f"{e} {d}/{n}" for e, (d, n) in running.items())
        where = f" ({parts})" if parts else ""
        return (
            f"units {self.done}/{self.total}{where}, {busy}/{self.workers} workers busy, "
            f"about {duration(left)} left"
        )

    def advance(self, running: Mapping[str, tuple[int, int]], busy: int, left: float) -> None:
        """One more unit done, `left` seconds expected to be left."""
        self.done += 1
        if on_terminal():
            parts = " ".join(f"{e} {d}/{n}" for e, (d, n) in running.items())
            self._bar.set_postfix_str(
                f"{parts} · {busy}/{self.workers} busy · about {duration(left)} left",
                refresh=False,
            )
            self._bar.update(1)
        elif self._clock() - self._last >= self._every and self.done < self.total:
            self._last = self._clock()
            self._log(self.line(running, busy, left))

    def close(self) -> None:
        self._bar.close()


def duration(seconds: float) -> str:
    """A length of time as a reader says it: `1.6 s`, `40 s`, `12 min`, `2.9 h`."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

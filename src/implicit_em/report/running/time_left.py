"""The time a report run has left, from the units still to finish and what each costs.

An experiment's units are alike (one seed of one configuration each), while experiments' units
differ by orders of magnitude (a mixture fit in a second, a transformer trained for an hour), so
the pace of the run so far says little of what is left. A unit still to finish is expected to
take the mean wall seconds of its own experiment's units finished in this run, or, before any
has, its experiment's expected seconds (measured before, else its registered budget) shared
among its units. With `workers` CPUs, a unit holding `threads` of them (at most all):

    left = max( Σ_units seconds · min(threads, workers) / workers ,  max_units seconds )

the work left in CPU-seconds spread over the workers, and never less than the longest unit left,
which runs on one worker whatever the others do. A unit in flight counts whole (an executor does
not say when each began), so the estimate errs long by at most one unit per worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Work", "seconds_left"]


@dataclass(frozen=True)
class Work:
    """One experiment's units still to finish, one `threads` entry each; `budget`, the seconds
    one of its units is expected to take before any finished; `finished` units of it done in
    this run, in `seconds` of wall time all together."""

    threads: tuple[int, ...]
    budget: float
    finished: int = 0
    seconds: float = 0.0

    @property
    def per_unit(self) -> float:
        """The seconds one of its units is expected to take: the mean of those finished in
        this run, else the budget."""
        return self.seconds / self.finished if self.finished else self.budget


def seconds_left(work: Iterable[Work], workers: int) -> float:
    """The seconds left for `work` on `workers` CPUs (the module docstring's `left`)."""
    left = [w for w in work if w.threads]
    if not left:
        return 0.0
    cpu = sum(w.per_unit * min(t, workers) for w in left for t in w.threads)
    return max(cpu / workers, max(w.per_unit for w in left))

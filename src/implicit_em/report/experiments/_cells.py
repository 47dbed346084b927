"""Table cells that show a per-seed mean with its 95% interval, as the criteria judge it."""

from __future__ import annotations

import math
from collections.abc import Sequence

from implicit_em.report.judging.stats import mean_interval

__all__ = ["interval_cell"]


def interval_cell(values: Sequence[float], digits: int = 3) -> str:
    """`"mean [low, high]"`: the Student-t 95% interval of the mean of `values` (one value per
    seed); the mean alone for one value, `"n/a"` when a value is not finite."""
    if not values or any(not math.isfinite(v) for v in values):
        return "n/a"
    interval = mean_interval(list(values))
    if len(values) == 1:
        return f"{interval.estimate:.{digits}f}"
    return f"{interval.estimate:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"

"""Resumable units of work: one seed of one configuration, computed once per report run.

Inside a report run the runner activates a unit folder for the experiment (keyed like its
cache entry, so a change of configuration or source starts afresh); `unit(name, compute)` then
reads `<folder>/<name>.json` back when it exists and otherwise computes the value and writes it
atomically. A killed report therefore loses at most the unit in progress. Outside a report run
`unit` just calls `compute()`. Values are plain JSON (floats, lists, dicts); what is returned is
always the JSON round trip, so a fresh value and a cached one are the same. Each computed unit's
wall time is kept beside the units (`_times.json`, read by `unit_times`), so a run resumed over
several sittings still knows how long each of its units took.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any

from implicit_em.report.files import json_default, write_json

__all__ = ["activate", "kept_units", "unit", "unit_times"]

_FOLDER: list[Path] = []

_TIMES = "_times.json"
"""The file beside the units holding each computed unit's wall seconds, by unit name."""


@contextmanager
def activate(folder: Path) -> Iterator[Path]:
    """Within the block, `unit` caches its values under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    _FOLDER.append(folder)
    try:
        yield folder
    finally:
        _FOLDER.pop()


def unit(name: str, compute: Callable[[], Any]) -> Any:
    """The JSON value of the unit `name`: read back when already computed in this run's folder."""
    if not re.fullmatch(r"[A-Za-z0-9.=+-][A-Za-z0-9_.=+-]*", name):
        raise ValueError(
            f"unit name must be letters, digits and _.=+- (not starting with _), got {name!r}"
        )
    if not _FOLDER:
        return json.loads(json.dumps(compute(), allow_nan=True, default=json_default))
    path = _FOLDER[-1] / f"{name}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            path.unlink(missing_ok=True)
    start = perf_counter()
    value = json.loads(json.dumps(compute(), allow_nan=True, default=json_default))
    seconds = perf_counter() - start
    write_json(path, value)
    write_json(_FOLDER[-1] / _TIMES, {**unit_times(_FOLDER[-1]), name: seconds})
    return value


def unit_times(folder: Path) -> dict[str, float]:
    """The wall seconds of each unit computed under `folder`, by name, over every run that
    worked there ({} when none was timed)."""
    try:
        times = json.loads((folder / _TIMES).read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in times.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def kept_units(folder: Path) -> int:
    """How many finished units `folder` holds."""
    return sum(1 for p in folder.glob("*.json") if p.name != _TIMES) if folder.is_dir() else 0

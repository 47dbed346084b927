"""The units' folder: each finished unit of an experiment kept as it is computed, for resuming.

While an experiment runs, the runner keeps each unit's JSON value (`plan.Done`) in
`<folder>/<name>.json`, written atomically by the driver whichever executor computed it, so a
killed report loses at most the units in progress and a unit already kept is never computed
again. Beside the values, `_times.json` holds each computed unit's wall seconds and
`_where.json` the host and device it ran on, over every sitting that worked there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from implicit_em.report.running.files import write_json
from implicit_em.report.running.plan import Done, check_name

__all__ = ["kept", "kept_units", "read_unit", "store", "unit_places", "unit_times"]

_TIMES = "_times.json"
"""The file beside the units holding each computed unit's wall seconds, by unit name."""

_WHERE = "_where.json"
"""The file beside the units holding the host and device each unit ran on, by unit name."""


def read_unit(folder: Path, name: str) -> tuple[bool, Any]:
    """Whether the unit `name` is kept in `folder`, and its value (an unreadable file is
    removed and counts as not kept)."""
    path = folder / f"{check_name(name)}.json"
    if not path.is_file():
        return False, None
    try:
        return True, json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        path.unlink(missing_ok=True)
        return False, None


def store(folder: Path, done: Done) -> None:
    """Keep a computed unit's value, its wall seconds and where it ran."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / f"{check_name(done.name)}.json", done.value)
    write_json(folder / _TIMES, {**unit_times(folder), done.name: done.seconds})
    places = unit_places(folder)
    write_json(folder / _WHERE, {**places, done.name: {"host": done.host, "device": done.device}})


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def unit_times(folder: Path) -> dict[str, float]:
    """The wall seconds of each unit computed under `folder`, by name, over every run that
    worked there ({} when none was timed)."""
    try:
        return {str(k): float(v) for k, v in _read(folder / _TIMES).items()}
    except (ValueError, TypeError):
        return {}


def unit_places(folder: Path) -> dict[str, dict[str, str]]:
    """The host and device each unit computed under `folder` ran on, by name."""
    return {
        str(k): {"host": str(v.get("host", "")), "device": str(v.get("device", ""))}
        for k, v in _read(folder / _WHERE).items()
        if isinstance(v, dict)
    }


def kept(folder: Path) -> set[str]:
    """The names of the finished units `folder` holds."""
    if not folder.is_dir():
        return set()
    return {p.stem for p in folder.glob("*.json") if not p.name.startswith("_")}


def kept_units(folder: Path) -> int:
    """How many finished units `folder` holds."""
    return len(kept(folder))

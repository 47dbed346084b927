"""The units' folder: each finished unit of an experiment kept as it is computed, for resuming.

While an experiment runs, the runner keeps each unit's JSON value (`plan.Done`) in
`<folder>/<name>.json`, written atomically by the driver whichever executor computed it, so a
killed report loses at most the units in progress and a unit already kept is never computed
again. Beside the values, `_times.json` holds each computed unit's wall seconds, `_cpu.json`
its CPU seconds (`usage.cpu_clock`) and `_where.json` the host, device and machine line it ran
on, over every sitting that worked there. A folder kept before CPU seconds and machine lines
were recorded has neither for its earlier units: they are missing, never read as 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from implicit_em.report.running.files import write_json
from implicit_em.report.running.plan import Done, check_name

__all__ = [
    "kept",
    "kept_units",
    "read_unit",
    "store",
    "unit_cpu",
    "unit_places",
    "unit_summary",
    "unit_times",
]

_TIMES = "_times.json"
"""The file beside the units holding each computed unit's wall seconds, by unit name."""

_CPU = "_cpu.json"
"""The file beside the units holding each computed unit's CPU seconds, by unit name."""

_WHERE = "_where.json"
"""The file beside the units holding the host, device and machine line each unit ran on, by
unit name."""


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
    """Keep a computed unit's value, its wall and CPU seconds and where it ran."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / f"{check_name(done.name)}.json", done.value)
    write_json(folder / _TIMES, {**unit_times(folder), done.name: done.seconds})
    if done.cpu_seconds is not None:
        write_json(folder / _CPU, {**unit_cpu(folder), done.name: done.cpu_seconds})
    write_json(folder / _WHERE, {**unit_places(folder), done.name: done.place})


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _seconds(path: Path) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in _read(path).items()}
    except (ValueError, TypeError):
        return {}


def unit_times(folder: Path) -> dict[str, float]:
    """The wall seconds of each unit computed under `folder`, by name, over every run that
    worked there ({} when none was timed)."""
    return _seconds(folder / _TIMES)


def unit_cpu(folder: Path) -> dict[str, float]:
    """The CPU seconds of each unit computed under `folder`, by name, over every run that
    worked there (a unit whose CPU time was not measured is missing)."""
    return _seconds(folder / _CPU)


def unit_places(folder: Path) -> dict[str, dict[str, str]]:
    """The host and device each unit computed under `folder` ran on, by name, with its
    machine line where one was recorded."""
    return {
        str(k): {
            "host": str(v.get("host", "")),
            "device": str(v.get("device", "")),
            **({"machine": str(v["machine"])} if v.get("machine") else {}),
        }
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


def _place(where: dict[str, str]) -> str:
    return f"{where['host']} ({where['device']})"


def unit_summary(folder: Path, resumed: int) -> dict[str, Any] | None:
    """What the units kept in `folder` took, over every sitting; None when none was timed.

    `count` units timed, their wall `seconds` together, the `longest` and its
    `longest_seconds`, how many were read back from an earlier sitting (`resumed`); their CPU
    seconds together (`cpu_seconds`, and `cpu_hours`) over the `cpu_units` whose CPU time was
    measured (None when none was); the distinct `machines` lines; `where` they ran, per host
    (device): the units, their wall and CPU seconds and the machine lines there; and `each`
    unit by name: its wall and CPU seconds (to the millisecond), host, device and the index of
    its machine line in `machines` (the last four missing where not recorded).
    """
    times, cpu, places = unit_times(folder), unit_cpu(folder), unit_places(folder)
    if not times:
        return None
    longest = max(times, key=times.__getitem__)
    machines = sorted({p["machine"] for n, p in places.items() if n in times and "machine" in p})
    where: dict[str, dict[str, Any]] = {}
    each: dict[str, dict[str, Any]] = {}
    for name, seconds in sorted(times.items()):
        record: dict[str, Any] = {"seconds": round(seconds, 3)}
        if name in cpu:
            record["cpu_seconds"] = round(cpu[name], 3)
        place = places.get(name)
        if place is not None:
            record |= {"host": place["host"], "device": place["device"]}
            entry = where.setdefault(
                _place(place),
                {"units": 0, "seconds": 0.0, "cpu_units": 0, "cpu_seconds": None, "machines": []},
            )
            entry["units"] += 1
            entry["seconds"] += seconds
            if name in cpu:
                entry["cpu_units"] += 1
                entry["cpu_seconds"] = (entry["cpu_seconds"] or 0.0) + cpu[name]
            if "machine" in place:
                record["machine"] = machines.index(place["machine"])
                if place["machine"] not in entry["machines"]:
                    entry["machines"].append(place["machine"])
        each[name] = record
    measured = [cpu[n] for n in times if n in cpu]
    cpu_seconds = sum(measured) if measured else None
    return {
        "count": len(times),
        "seconds": sum(times.values()),
        "longest": longest,
        "longest_seconds": times[longest],
        "resumed": resumed,
        "cpu_units": len(measured),
        "cpu_seconds": cpu_seconds,
        "cpu_hours": None if cpu_seconds is None else cpu_seconds / 3600,
        "machines": machines,
        "where": where,
        "each": each,
    }

"""What an experiment's units took, as its provenance line on the page says it: how many, their
wall seconds together and the longest, their CPU seconds and CPU-hours, and per host (device)
where they ran, with the machine lines (`running.units.unit_summary`). A figure that was not
recorded (a result cached before CPU seconds or machine lines were kept) is left out, never
shown as 0."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from implicit_em.pages import escape as _esc

__all__ = ["cpu_text", "units_line"]


def cpu_text(cpu_seconds: float | None, cpu_units: int, count: int) -> str:
    """`CPU 12.3 s = 0.0034 CPU-hours` (over how many units, when not all were measured);
    '' when none was."""
    if cpu_seconds is None or not cpu_units:
        return ""
    over = "" if cpu_units == count else f" over {cpu_units} of {count} units"
    return f"CPU {cpu_seconds:.1f} s = {cpu_seconds / 3600:.3g} CPU-hours{over}"


def units_line(units: Mapping[str, Any] | None) -> str:
    """The experiment's units as its provenance line shows them ('' when none was timed)."""
    if not units:
        return ""
    read_back = units["resumed"]
    resumed = f", {_esc(read_back)} read back from an earlier sitting" if read_back else ""
    cpu = cpu_text(units.get("cpu_seconds"), units.get("cpu_units", 0), units["count"])
    return (
        f"; {_esc(units['count'])} units of work, {units['seconds']:.1f} s together"
        f"{', ' + _esc(cpu) if cpu else ''}, the longest "
        f"{_esc(units['longest'])} {units['longest_seconds']:.1f} s{resumed}"
        f"{_where_line(units.get('where') or {})}"
    )


def _where_line(where: Mapping[str, Mapping[str, Any]]) -> str:
    """Where the units ran: per host (device), how many, their wall and CPU seconds and the
    machine lines ('' when not recorded)."""
    if not where:
        return ""
    places = []
    for place, used in sorted(where.items()):
        n = int(used["units"])
        cpu = cpu_text(used.get("cpu_seconds"), used.get("cpu_units", 0), n)
        machines = " / ".join(used.get("machines") or [])
        places.append(
            f"{_esc(place)}: {n} unit{'' if n == 1 else 's'}, {used['seconds']:.1f} s"
            f"{', ' + _esc(cpu) if cpu else ''}"
            f"{', machine ' + _esc(machines) if machines else ''}"
        )
    return f"; ran on {'; '.join(places)}"

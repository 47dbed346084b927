r"""The registry of protocols: which protocol versions were registered, when, and why they changed.

`protocols/registry.json` is committed with the code. For each experiment it keeps

* `versions`: every registered version of its protocol, oldest first: its `hash`
  (`Protocol.hash`), the UTC time it was `registered`, and for every version after the first the
  `amendment` that made it: `date`, `reason`, whether it was made `after_data` (after
  confirmatory data of this protocol had been seen), what the data showed then (`seen`) and the
  seeds whose results had been seen (`seeds_seen`);
* `history`: amendments made before the registry existed, recorded with the same fields;
* `data_seen`: for each size whose data were published (`record_data_seen`), when they were
  first seen (the run's start), on which seeds (every seed list of its configuration, nested ones
  included), and the measurement and judgement keys
  (`implicit_em.report.running.keys`) of that run.

A verdict is **exploratory** when it rests on any change made after its data were seen
(`exploratory_reason`): an amendment made after data were seen that touches the seeds it was
measured on (its rule was chosen knowing those seeds' numbers), or a measurement or judgement key
that differs from the one its seeds' data were first seen with (its measurement code, data,
libraries, judging code, rule or thresholds changed since). It stops being exploratory when the
protocol moves to fresh seeds (a new registered version) and is rerun on them.

`implicit-em publish` refuses a full run whose protocol was never registered or was registered
after the run started (`check_run`).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from implicit_em.report.rules.protocol import PROTOCOL_DIR, Protocol, seed_lists
from implicit_em.report.running.files import write_atomic

__all__ = [
    "REGISTRY",
    "TIME_FORMAT",
    "Amendment",
    "ProtocolStatus",
    "check_run",
    "exploratory_reason",
    "now",
    "read_registry",
    "record_data_seen",
    "register",
    "status",
    "unregistered",
]

REGISTRY = PROTOCOL_DIR / "registry.json"
TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
"""How registration and run times are written (UTC, to the second; compared as text)."""


def now() -> str:
    """The current UTC time in `TIME_FORMAT`."""
    return _dt.datetime.now(_dt.UTC).strftime(TIME_FORMAT)


@dataclass(frozen=True)
class Amendment:
    """A change to a protocol: when, why, and whether it was made knowing confirmatory data."""

    date: str
    reason: str
    after_data: bool
    seen: str = ""
    seeds_seen: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "reason": self.reason,
            "after_data": self.after_data,
            "seen": self.seen,
            "seeds_seen": list(self.seeds_seen),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Amendment:
        return cls(
            str(data["date"]),
            str(data["reason"]),
            bool(data["after_data"]),
            str(data.get("seen", "")),
            tuple(int(s) for s in data.get("seeds_seen", ())),
        )


@dataclass(frozen=True)
class ProtocolStatus:
    """A protocol as the registry knows it: `registered` is None when its hash never was."""

    hash: str
    registered: str | None
    amendments: tuple[Amendment, ...]

    def exploratory(self, seeds: Sequence[int]) -> bool:
        """Whether a verdict measured on `seeds` rests on an amendment made after data of those
        seeds were seen."""
        measured = {int(s) for s in seeds}
        return any(a.after_data and measured & set(a.seeds_seen) for a in self.amendments)

    def as_dict(self) -> dict[str, Any]:
        return {
            "hash": self.hash,
            "registered": self.registered,
            "amendments": [a.as_dict() for a in self.amendments],
        }


def read_registry(path: Path | None = None) -> dict[str, Any]:
    """The registry's content at `path` (`REGISTRY` when None; empty when there is no file)."""
    path = REGISTRY if path is None else path
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def status(protocol: Protocol, registry: Mapping[str, Any] | None = None) -> ProtocolStatus:
    """What the registry says of `protocol`'s current version: when it was registered and
    every amendment up to it (the history before the registry included)."""
    registry = read_registry() if registry is None else registry
    entry = registry.get(protocol.id, {})
    amendments = [Amendment.from_dict(a) for a in entry.get("history", [])]
    for version in entry.get("versions", []):
        if version.get("amendment"):
            amendments.append(Amendment.from_dict(version["amendment"]))
        if version["hash"] == protocol.hash:
            return ProtocolStatus(protocol.hash, version["registered"], tuple(amendments))
    return ProtocolStatus(protocol.hash, None, tuple(amendments))


def unregistered(
    protocols: Sequence[Protocol], registry: Mapping[str, Any] | None = None
) -> list[str]:
    """The ids of `protocols` whose current version is not the latest registered one."""
    registry = read_registry() if registry is None else registry
    out = []
    for p in protocols:
        versions = registry.get(p.id, {}).get("versions", [])
        if not versions or versions[-1]["hash"] != p.hash:
            out.append(p.id)
    return out


def register(
    protocols: Sequence[Protocol],
    reason: str = "",
    after_data: bool = False,
    seen: str = "",
    seeds_seen: Sequence[int] = (),
    path: Path | None = None,
    when: str | None = None,
) -> list[str]:
    """Register the current version of each protocol that is not registered yet.

    A protocol registered for the first time needs no reason; a later version is an amendment
    and needs one (`ValueError` naming `reason` otherwise), and one made `after_data` must say
    what the data showed (`seen`) and which seeds had been seen. Returns the ids registered.
    """
    path = REGISTRY if path is None else path
    registry = read_registry(path)
    when = when or now()
    todo = unregistered(protocols, registry)
    amending = [i for i in todo if registry.get(i, {}).get("versions")]
    if amending and not reason.strip():
        raise ValueError(
            f"--reason: {', '.join(amending)} already registered; a new version is an amendment "
            "and needs its reason"
        )
    if after_data and not (seen.strip() and seeds_seen):
        raise ValueError("--seen and --seeds-seen: an amendment after data says what was seen")
    for p in protocols:
        if p.id not in todo:
            continue
        entry = registry.setdefault(p.id, {"history": [], "versions": []})
        amendment = (
            Amendment(when, reason.strip(), after_data, seen.strip(), tuple(seeds_seen)).as_dict()
            if entry["versions"]
            else None
        )
        entry["versions"].append({"hash": p.hash, "registered": when, "amendment": amendment})
    write_atomic(path, json.dumps(registry, indent=1, ensure_ascii=False) + "\n")
    return todo


def check_run(
    entries: Sequence[Mapping[str, Any]], registry: Mapping[str, Any] | None = None
) -> list[str]:
    """Why each experiment of a run may not be published, one phrase each (empty: none).

    An experiment's entry (in a report's `results.json`) records its `protocol` hash and the UTC
    time its measurement `started`; that hash must have been registered before that time.
    """
    registry = read_registry() if registry is None else registry
    problems = []
    for entry in entries:
        ident = entry["id"]
        recorded = (entry.get("protocol") or {}).get("hash")
        started = entry.get("started")
        versions = registry.get(ident, {}).get("versions", [])
        when = next((v["registered"] for v in versions if v["hash"] == recorded), None)
        if recorded is None or started is None:
            problems.append(f"{ident}: the run does not record its protocol and start time")
        elif when is None:
            problems.append(f"{ident}: protocol {recorded} was never registered")
        elif when > started:
            problems.append(
                f"{ident}: protocol {recorded} was registered {when}, after the run started {started}"
            )
    return problems


def record_data_seen(
    entries: Sequence[Mapping[str, Any]], size: str, path: Path | None = None
) -> list[str]:
    """Record, for each experiment `entry` (of a report's `results.json`) whose data at `size`
    were not recorded yet, when its run started, its seeds (its `seeds` and every seed list of
    its configuration, `seed_lists`: a nested list's data are seen too) and its measurement and
    judgement keys. Returns the ids recorded; what was recorded first stays."""
    path = REGISTRY if path is None else path
    registry = read_registry(path)
    done = []
    for entry in entries:
        seen = registry.setdefault(entry["id"], {"history": [], "versions": []})
        seen = seen.setdefault("data_seen", {})
        if size in seen:
            continue
        seen[size] = {
            "when": entry.get("started"),
            "seeds": sorted(
                {int(s) for s in entry.get("seeds") or []} | set(seed_lists(entry.get("config")))
            ),
            "measurement": (entry.get("measurement") or {}).get("key"),
            "judgement": (entry.get("judgement") or {}).get("key"),
        }
        done.append(entry["id"])
    if done:
        write_atomic(path, json.dumps(registry, indent=1, ensure_ascii=False) + "\n")
    return done


def exploratory_reason(
    experiment_id: str,
    size: str,
    seeds: Sequence[int],
    measurement_key: str | None,
    judgement_key: str | None,
    registry: Mapping[str, Any] | None = None,
) -> str | None:
    """Why a verdict of `experiment_id` measured at `size` on `seeds` with these keys is
    exploratory because something changed after its data were seen (None when nothing did, or
    when no data of these seeds at this size were recorded as seen)."""
    registry = read_registry() if registry is None else registry
    seen = registry.get(experiment_id, {}).get("data_seen", {}).get(size)
    if not seen or not {int(s) for s in seeds} & set(seen["seeds"]):
        return None
    changed = []
    if measurement_key != seen["measurement"]:
        changed.append("its measurement (code, data, libraries or configuration)")
    if judgement_key != seen["judgement"]:
        changed.append("its judging code or rule")
    if not changed:
        return None
    return f"{' and '.join(changed)} changed after its {size} data were first seen ({seen['when']})"

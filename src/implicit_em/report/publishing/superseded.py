"""A published run superseded by code it no longer matches, until it is run again.

Between a change of measurement or judging code and the next confirmatory run, the published
report describes code that is no longer there. `implicit-em publish --supersede REASON` says so
in the publication folder (`superseded.json`: when, why, the source commit, and the experiments
stale then). `implicit-em publish --check` still lists every stale experiment, and passes only
while each of them is among those recorded: an experiment that goes stale afterwards fails it.
A new publication into the folder removes the record (`publish.publish`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from implicit_em.report.running.files import write_atomic

__all__ = ["FILE", "Superseded", "read_superseded", "supersede", "uncovered"]

FILE = "superseded.json"
"""The record's file name in the publication folder."""


@dataclass(frozen=True)
class Superseded:
    """Why the published run is superseded (`reason`), since `when` (UTC), by the code of
    `commit`, and which experiments were stale then (`stale`)."""

    reason: str
    when: str
    commit: str
    stale: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"superseded since {self.when} by the code of {self.commit} ({self.reason}); "
            f"{len(self.stale)} experiment(s) await a rerun at full size and a new publication"
        )


def read_superseded(folder: Path | str) -> Superseded | None:
    """The record in `folder`, or None when the published run is not marked superseded
    (`ValueError` naming the file when it is there but malformed)."""
    path = Path(folder) / FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Superseded(
            str(data["reason"]), str(data["when"]), str(data["commit"]), tuple(data["stale"])
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a superseded record ({err})") from err


def supersede(
    folder: Path | str, reason: str, stale: Sequence[str], commit: str, when: str
) -> Path:
    """Write the record into `folder` and return its path: `ValueError` naming `reason` when
    it is empty, or `stale` when nothing is stale (a fresh publication is not superseded)."""
    if not reason.strip():
        raise ValueError("--supersede: expected the reason the published run is superseded")
    if not stale:
        raise ValueError("--supersede: every published experiment matches the current source")
    record = Superseded(reason.strip(), when, commit, tuple(sorted(stale, key=_order)))
    path = Path(folder) / FILE
    write_atomic(path, json.dumps(asdict(record), indent=1, ensure_ascii=False) + "\n")
    return path


def uncovered(record: Superseded | None, stale: Sequence[str]) -> list[str]:
    """The stale experiments the record does not name (all of them without a record)."""
    named = set() if record is None else set(record.stale)
    return [s for s in stale if s not in named]


def _order(ident: str) -> tuple[int, str]:
    digits = "".join(c for c in ident if c.isdigit())
    return (int(digits) if digits else 0, ident)

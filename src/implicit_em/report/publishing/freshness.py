"""Whether a published full-size report still matches the inputs that would produce it.

Every published experiment records two keys (`implicit_em.report.running.keys`): its **measurement**
record (the hashes of the package modules it used, its configuration, its data files, the
versions of its libraries, its device) and its **judgement** record (the hashes of the judging
and statistics code and of its registered rule). An experiment is

* **measurement-stale** when an input of its measurement differs now (each changed module file,
  data file, library version or configuration is named), when the publication predates the
  measurement record, or when it is no longer an experiment of the report: its numbers describe
  code, data or libraries that are not there any more, and the fix is to rerun it at full size
  (`refresh_command`);
* **judgement-stale** when only its judging code or its rule changed: its per-seed samples still
  hold, and `implicit-em publish --rejudge` computes its verdict again under the current rule
  (marking it exploratory).

A change to the documentation touches neither key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from implicit_em.report.running.imports import SOURCE_ROOT
from implicit_em.report.running.keys import judgement_changes, measurement_changes
from implicit_em.report.running.registry import Experiment, select

__all__ = [
    "REFRESH_OUT",
    "REJUDGE",
    "Stale",
    "published_document",
    "refresh_command",
    "stale_experiments",
]

REJUDGE = "implicit-em publish --rejudge"
"""The command that judges the published samples again under the current rules."""

LEGACY = "measurement key not recorded: published before measurement keys; rerun"

REFRESH_OUT = "report/full"
"""The folder the refresh command runs the full report in (kept, so a second refresh reruns
only what changed)."""


@dataclass(frozen=True)
class Stale:
    """A published experiment whose verdict no longer matches its inputs: which kind of stale
    (`measurement` or `judgement`), what changed, and the fix."""

    id: str
    kind: str
    reason: str
    command: str

    def __str__(self) -> str:
        fix = "refresh with" if self.kind == "measurement" else "fix with"
        return f"{self.id}: {self.kind}-stale: {self.reason}; {fix} `{self.command}`"


def published_document(folder: Path | str) -> dict[str, Any] | None:
    """The published `results.json` in `folder`, or None when nothing is published there
    (`ValueError` naming the file when it is there but not a report)."""
    path = Path(folder) / "results.json"
    return read_document(path) if path.is_file() else None


def read_document(path: Path | str) -> dict[str, Any]:
    """The report document (a `results.json`) at `path`: `ValueError` naming the file when it
    is not a report, `OSError` when it cannot be read."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path}: not a report's results.json ({err})") from err
    if not isinstance(document, dict) or not {"meta", "experiments"} <= set(document):
        raise ValueError(f"{path}: not a report's results.json (no meta and experiments)")
    return document


def refresh_command(
    ids: Sequence[str], device: str = "cpu", partial: bool = False, all_ids: Sequence[str] = ()
) -> str:
    """The command that reruns what changed at full size and publishes again: `ids` are the
    experiments of the publication that are still in the report (none, or all of `all_ids`:
    no `--only`, the whole report)."""
    only = "" if not ids or set(ids) >= set(all_ids) else f" --only {','.join(ids)}"
    on = "" if device == "cpu" else f" --device {device}"
    again = " --partial" if partial else ""
    return (
        f"implicit-em report --full{only}{on} --out {REFRESH_OUT} && "
        f"implicit-em publish --from {REFRESH_OUT}{again}"
    )


def stale_experiments(
    document: Mapping[str, Any],
    experiments: Sequence[Experiment] | None = None,
    root: Path = SOURCE_ROOT,
) -> list[Stale]:
    """The experiments of a published full-size `document` whose recorded measurement or
    judgement record differs from what the current source under `root` (the folder holding
    the `implicit_em` package), data files, libraries and protocols give.

    `experiments` is the report's registry (all listed experiments when None).
    """
    registry = {e.id: e for e in (select() if experiments is None else experiments)}
    entries = document["experiments"]
    devices = {e.get("config", {}).get("device", "cpu") for e in entries}
    publication = document["meta"].get("publication") or {}
    command = refresh_command(
        [e["id"] for e in entries if e["id"] in registry],
        device=devices.pop() if len(devices) == 1 else "cpu",
        partial=bool(publication.get("partial")),
        all_ids=list(registry),
    )
    stale = []
    for entry in entries:
        experiment = registry.get(entry["id"])
        if experiment is None:
            reason = "is no longer an experiment of the report"
            stale.append(Stale(entry["id"], "measurement", reason, command))
            continue
        if entry.get("error"):
            continue  # it measured nothing: a gap of the publication, not a stale result
        measured = _measurement_reasons(entry, experiment, root)
        if measured:
            stale.append(Stale(entry["id"], "measurement", "; ".join(measured), command))
            continue
        judged = judgement_changes(_record(entry, "judgement"), experiment.protocol, root)
        if judged:
            stale.append(Stale(entry["id"], "judgement", "; ".join(judged), REJUDGE))
    return stale


def _record(entry: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return (entry.get(kind) or {}).get("record") or {"modules": {}, "rule": None}


def _measurement_reasons(entry: Mapping[str, Any], experiment: Experiment, root: Path) -> list[str]:
    """What changed in the measurement of a published `entry` (its legacy state when it
    records no measurement)."""
    recorded = (entry.get("measurement") or {}).get("record")
    if recorded is None:
        return [LEGACY]
    device = recorded["config"]["run"].get("device", entry.get("config", {}).get("device", "cpu"))
    config = {**experiment.configs[entry.get("size") or "full"], "device": device}
    return measurement_changes(recorded, config, experiment.configs["control"], root)

"""Whether a published full-size report still matches the source that would produce it.

Every published experiment records the cache key its run computed, a hash of its id, size,
full-size configuration (device included) and the source of its module and helpers
(`runner.cache_key`). An experiment is **stale** when the key that the current source and the
current full configuration give differs from the recorded one, or when it is no longer an
experiment of the report: its published numbers then describe code that is not there any more.
Each stale experiment comes with the command that refreshes the publication.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from implicit_em.report.registry import Experiment, select
from implicit_em.report.runner import cache_key

__all__ = ["REFRESH_OUT", "Stale", "published_document", "refresh_command", "stale_experiments"]

REFRESH_OUT = "report/full"
"""The folder the refresh command runs the full report in (kept, so a second refresh reruns
only what changed)."""


@dataclass(frozen=True)
class Stale:
    """A published experiment whose numbers no longer match the source: why, and the fix."""

    id: str
    reason: str
    command: str

    def __str__(self) -> str:
        return f"{self.id}: {self.reason}; refresh with `{self.command}`"


def published_document(folder: Path | str) -> dict[str, Any] | None:
    """The published `results.json` in `folder`, or None when nothing is published there
    (`ValueError` naming the file when it is there but not a report)."""
    path = Path(folder) / "results.json"
    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
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
    document: Mapping[str, Any], experiments: Sequence[Experiment] | None = None
) -> list[Stale]:
    """The experiments of a published full-size `document` whose recorded key differs from
    `cache_key(experiment, "full", its full config)` computed from the current source.

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
            stale.append(Stale(entry["id"], "is no longer an experiment of the report", command))
            continue
        config = {
            **experiment.configs["full"],
            "device": entry.get("config", {}).get("device", "cpu"),
        }
        current = cache_key(experiment, "full", config)
        if entry.get("key") != current:
            stale.append(
                Stale(
                    entry["id"],
                    f"published with key {entry.get('key')}, but its current source and full "
                    f"configuration give {current}",
                    command,
                )
            )
    return stale

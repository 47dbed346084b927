"""Resumable units of work: one seed of one configuration, computed once per report run.

Inside a report run the runner activates a unit folder for the experiment (keyed like its
cache entry, so a change of configuration or source starts afresh); `unit(name, compute)` then
reads `<folder>/<name>.json` back when it exists and otherwise computes the value and writes it
atomically. A killed report therefore loses at most the unit in progress. Outside a report run
`unit` just calls `compute()`. Values are plain JSON (floats, lists, dicts); what is returned is
always the JSON round trip, so a fresh value and a cached one are the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from implicit_em.report.files import json_default, write_json

__all__ = ["activate", "unit"]

_FOLDER: list[Path] = []


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
    if not re.fullmatch(r"[A-Za-z0-9_.=+-]+", name):
        raise ValueError(f"unit name must be letters, digits and _.=+-, got {name!r}")
    if not _FOLDER:
        return json.loads(json.dumps(compute(), allow_nan=True, default=json_default))
    path = _FOLDER[-1] / f"{name}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            path.unlink(missing_ok=True)
    value = json.loads(json.dumps(compute(), allow_nan=True, default=json_default))
    write_json(path, value)
    return value

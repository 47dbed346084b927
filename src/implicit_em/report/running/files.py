"""Atomic JSON files for the report: written aside in the same folder, then renamed.

A file written aside is private to its owner (`mkstemp` makes it `-rw-------`); before the
rename it gets the mode any other new file gets (`0o666` less the umask: `-rw-r--r--` under
the usual umask 022), so the report's files are readable as other tools' outputs are.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["as_new_file", "json_default", "write_atomic", "write_json"]


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        as_new_file(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def as_new_file(path: Path) -> None:
    """Give a file or folder made private by `mkstemp`/`mkdtemp` the mode any new one gets:
    `0o666` (a folder `0o777`) less the process's umask."""
    mask = os.umask(0o022)  # read by setting it and setting it back
    os.umask(mask)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def json_default(value: Any) -> Any:
    """numpy and torch scalars and arrays as plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def write_json(path: Path, value: Any) -> None:
    """`value` as JSON (NaN and infinities kept), written atomically."""
    write_atomic(path, json.dumps(value, indent=1, allow_nan=True, default=json_default))

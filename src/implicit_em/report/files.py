"""Atomic JSON files for the report: written aside in the same folder, then renamed."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["json_default", "write_atomic", "write_json"]


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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

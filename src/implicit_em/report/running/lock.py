"""One report at a time per output folder: a lock file naming the process and host that hold it.

`hold(out)` creates `<out>/.report.lock` (exclusively) holding `pid host`, and removes it when
the block ends. A second report on the same folder is refused with one line naming the holder.
A lock left by a process that is gone (same host, pid no longer alive) is stale and taken over;
a lock held from another host is refused, since its process cannot be checked from here.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOCK", "Locked", "hold"]

LOCK = ".report.lock"


class Locked(ValueError):
    """Another report holds the output folder."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(path: Path) -> tuple[int, str] | None:
    """The pid and host in the lock file; None when it is unreadable."""
    try:
        pid, host = path.read_text(encoding="utf-8").split(maxsplit=1)
        return int(pid), host.strip()
    except (OSError, ValueError):
        return None


@contextmanager
def hold(out: Path) -> Iterator[Path]:
    """Hold `out`'s lock within the block (`Locked` when a live report holds it)."""
    path = out / LOCK
    me = f"{os.getpid()} {platform.node()}"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if holder is None:
                path.unlink(missing_ok=True)
                continue
            pid, host = holder
            if host == platform.node() and not _alive(pid):
                path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            raise Locked(
                f"--out {out}: another report (pid {pid} on {host}) is running there; "
                f"wait for it or remove {path} if it is gone"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(me)
        break
    else:
        raise Locked(f"--out {out}: could not take the lock {path}")
    try:
        yield path
    finally:
        if _holder(path) == (os.getpid(), platform.node()):
            path.unlink(missing_ok=True)

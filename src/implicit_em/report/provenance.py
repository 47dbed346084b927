"""The commit of the source a report runs from, recorded beside every experiment's numbers."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["source_commit"]

_ROOT = Path(__file__).resolve().parents[3]


def source_commit(root: Path = _ROOT) -> str:
    """The commit of the git checkout at `root` (12 hex digits), `+modified` when tracked files
    differ from it, or `unknown` outside a git checkout (an installed wheel)."""
    if not (root / "src" / "implicit_em" / "__init__.py").is_file():
        return "unknown"  # installed, not a checkout: a folder above could be another repository
    try:
        head = _git(root, "rev-parse", "--short=12", "HEAD")
        changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", "src")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+modified" if changed else "")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.strip()

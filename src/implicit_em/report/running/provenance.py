"""The commit of the source a report runs from, and whether its checkout was clean: recorded
beside every experiment's numbers and on every publication."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHECKOUT", "TreeState", "source_commit", "tree_state"]

CHECKOUT = Path(__file__).resolve().parents[4]
"""The repository root of a checked-out package (meaningless for an installed wheel)."""


@dataclass(frozen=True)
class TreeState:
    """A checkout's commit (12 hex digits, `unknown` outside a git checkout) and whether its
    tree was clean: no tracked file changed and no untracked file outside `.gitignore`
    (`changed` lists what was not, as `git status --porcelain` names them)."""

    commit: str
    clean: bool
    changed: tuple[str, ...] = ()


def source_commit(root: Path = CHECKOUT) -> str:
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


def tree_state(root: Path = CHECKOUT) -> TreeState:
    """The commit of the checkout at `root` and whether its whole tree is clean (an installed
    package, or a folder that is not a checkout of it, is `unknown` and not clean)."""
    if not (root / "src" / "implicit_em" / "__init__.py").is_file():
        return TreeState("unknown", False, ("not a checkout of implicit-em",))
    try:
        head = _git(root, "rev-parse", "--short=12", "HEAD")
        status = _git(root, "status", "--porcelain")
    except (OSError, subprocess.SubprocessError):
        return TreeState("unknown", False, ("not a git checkout",))
    changed = tuple(line.split(maxsplit=1)[-1] for line in status.splitlines() if line.strip())
    return TreeState(head, not changed, changed)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.strip()

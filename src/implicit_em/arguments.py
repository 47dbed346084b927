"""Checks of command-line arguments shared by the `implicit-em` subcommands.

Every subcommand checks all of its arguments before any work starts, and a bad one is one line
on stderr, `error: ...` naming the option, with exit status 2 (`fail`). `OneLineErrors` gives
the parser's own errors (an unknown option, a value of the wrong type or out of range, a
missing argument) the same form instead of a usage panel.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
import typer
from typer.core import TyperGroup

__all__ = [
    "OneLineErrors",
    "check_device",
    "check_writable_file",
    "check_writable_folder",
    "fail",
    "names",
    "warn",
]


def fail(message: str) -> NoReturn:
    """Print `error: message` on one line of stderr and exit with status 2."""
    typer.echo("error: " + " ".join(message.split()), err=True)
    raise typer.Exit(code=2)


def warn(message: str) -> None:
    """Print `warning: message` on one line of stderr."""
    typer.echo("warning: " + " ".join(message.split()), err=True)


def names(values: Iterable[str] | None) -> list[str] | None:
    """The names of a list option given repeated, comma-separated, or both (`--only a,b --only
    c`), in order; None when none is given."""
    found = [n.strip() for v in values or () for n in v.split(",") if n.strip()]
    return found or None


def check_device(device: str, option: str = "--device") -> None:
    """`device` is `cpu`, `cuda` or `cuda:N`, and a CUDA device exists here if one is named."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (kind == "cpu" and index) or (index and not index.isdigit()):
        fail(f"{option} {device}: expected cpu, cuda or cuda:N")
    if kind == "cuda":
        if not torch.cuda.is_available():
            fail(f"{option} {device}: no CUDA device is available on this machine")
        if index and int(index) >= torch.cuda.device_count():
            fail(f"{option} {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def _can_create_in(folder: Path) -> bool:
    """Whether a file can be created in the existing folder (tried, then removed)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def check_writable_folder(path: Path, option: str) -> None:
    """`path` is a folder that can be written, or can be created (nothing is created here)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        fail(f"{option} {path}: not a writable folder ({existing} is not a folder)")
    if not _can_create_in(existing):
        fail(f"{option} {path}: not a writable folder")


def check_writable_file(path: Path, option: str) -> None:
    """`path` can be written as a file: not a folder, in an existing writable folder."""
    if path.is_dir():
        fail(f"{option} {path}: is a folder, expected a file path")
    if not path.parent.is_dir():
        fail(f"{option} {path}: the folder {path.parent} does not exist")
    if path.exists():
        writable = os.access(path, os.W_OK) and _can_create_in(path.parent)
    else:
        writable = _can_create_in(path.parent)
    if not writable:
        fail(f"{option} {path}: not a writable file path")


class OneLineErrors(TyperGroup):
    """A command group whose parser errors are one line, `error: ...`, and exit status 2."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        given = sys.argv[1:] if args is None else list(args)
        if not standalone_mode or not given:  # no arguments: the help
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            # Not standalone: an exit returns its code, and the parser's errors reach here.
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as err:
            typer.echo("error: " + " ".join(err.format_message().split()), err=True)
            code = 2
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            code = 1
        sys.exit(code if isinstance(code, int) else 0)

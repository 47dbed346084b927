"""Checks of command-line arguments shared by the `implicit-em` subcommands.

Every subcommand checks all of its arguments before any work starts, and a bad one is one line
on stderr, `error: ...` naming the option, with exit status 2 (`fail`). `OneLineErrors` gives
the parser's own errors (an unknown option, a value of the wrong type or out of range, a
missing argument) the same form instead of a usage panel, worded as what was expected.
`needs_extra` gives a command whose optional dependencies are not installed the same form,
naming the extra to install. `PlainUsage` writes a command's arguments in its usage line by
name (`DATA`), as the help lists them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import torch
import typer
from typer._click import Context
from typer._click.exceptions import BadParameter, MissingParameter
from typer.core import TyperArgument, TyperCommand, TyperGroup

__all__ = [
    "SEED_RANGE",
    "OneLineErrors",
    "PlainUsage",
    "check_device",
    "check_writable_file",
    "check_writable_folder",
    "fail",
    "missing_modules",
    "names",
    "needs_extra",
    "warn",
]

SEED_RANGE = {"min": 0, "max": 2**32 - 1}
"""The range of every `--seed` option (`typer.Option(0, **SEED_RANGE)`): what NumPy's and
scikit-learn's random states take."""

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> NoReturn:
    """Print `error: message` on one line of stderr and exit with status 2."""
    typer.echo("error: " + " ".join(message.split()), err=True)
    raise typer.Exit(code=2)


def warn(message: str) -> None:
    """Print `warning: message` on one line of stderr."""
    typer.echo("warning: " + " ".join(message.split()), err=True)


def names(values: Iterable[str] | None, option: str = "--only") -> list[str] | None:
    """The names of a list option given repeated, comma-separated, or both (`--only a,b --only
    c`), in order; None when the option is not given. Given with no name in it (`--only ''`,
    `--only ,,`), it is an error, not "all"."""
    given = list(values or ())
    found = [n.strip() for v in given for n in v.split(",") if n.strip()]
    if given and not found:
        fail(f"{option} {','.join(given)!r}: no name given; leave the option out to select all")
    return found or None


def check_device(device: str, option: str = "--device") -> str:
    """`device` is `cpu` (also `cpu:0`), `cuda` or `cuda:N`, and a CUDA device exists here if
    one is named. Returns the device as torch names it (`cpu:0` is `cpu`)."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()):
        fail(f"{option} {device}: expected cpu, cuda or cuda:N")
    if kind == "cpu":
        if index and int(index) != 0:
            fail(f"{option} {device}: the CPU is one device, cpu (or cpu:0)")
        return "cpu"
    if kind == "cuda":
        if not torch.cuda.is_available():
            fail(f"{option} {device}: no CUDA device is available on this machine")
        if index and int(index) >= torch.cuda.device_count():
            fail(f"{option} {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


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


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of `modules` that cannot be imported here (found without importing them)."""
    missing = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or blocked in sys.modules
            found = False
        if not found:
            missing.append(module)
    return missing


def needs_extra(command: str, extra: str, modules: Sequence[str]) -> Callable[[F], F]:
    """Wrap the command function of `implicit-em COMMAND` so that, before any work, a missing
    module of its optional dependencies is one line naming the extra to install, exit 2."""

    def wrap(function: F) -> F:
        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            missing = missing_modules(modules)
            if missing:
                fail(
                    f"implicit-em {command} needs {' and '.join(missing)}, which "
                    f"{'is' if len(missing) == 1 else 'are'} not installed: "
                    f"pip install 'implicit-em[{extra}]'"
                )
            return function(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return wrap


class PlainUsage(TyperCommand):
    """A command whose usage line names its arguments as its help lists them (`DATA`, not
    `{DATA}`)."""

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.display_name_raw.upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


_EXPECTED = [
    (re.compile(r"^Value error, "), ""),
    (re.compile(r"^Input should be a valid integer.*"), "expected an integer"),
    (re.compile(r"^Input should be a valid number.*"), "expected a number"),
    (re.compile(r"^Input should be greater than or equal to "), "expected a value >= "),
    (re.compile(r"^Input should be less than or equal to "), "expected a value <= "),
    (re.compile(r"^Input should be greater than "), "expected a value > "),
    (re.compile(r"^Input should be less than "), "expected a value < "),
    (re.compile(r"^Input should be "), "expected "),
    (re.compile(r"'([^']*)' is not one of "), r"'\1' is not one of "),
]


def _param_name(param: Any) -> str:
    """An option by its long name (`--components`), an argument by its name (`DATA`)."""
    if isinstance(param, TyperArgument):
        return str(param.metavar or param.name).upper()
    return max(param.opts, key=len)


def _parser_message(err: Exception) -> str:
    """The parser's error `err` as one line, worded as what was expected: `--tol: expected a
    value >= 0`, `--covariance: 'x' is not one of 'full', ...`, `DATA: missing`."""
    param = getattr(err, "param", None)
    if isinstance(err, MissingParameter) and param is not None:
        return f"{_param_name(param)}: missing"
    if isinstance(err, BadParameter) and param is not None:
        message = str(err.message).strip().rstrip(".")
        for pattern, replacement in _EXPECTED:
            message = pattern.sub(replacement, message)
        return f"{_param_name(param)}: {message}"
    return " ".join(err.format_message().split()).rstrip(".")


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
            help_hint = f" (see {err.ctx.command_path} --help)" if err.ctx is not None else ""
            typer.echo(f"error: {_parser_message(err)}{help_hint}", err=True)
            code = 2
        except typer.Abort:  # end of input where a command read from it
            typer.echo("error: the input ended before the command finished", err=True)
            code = 2
        sys.exit(code if isinstance(code, int) else 0)

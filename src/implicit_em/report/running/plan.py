"""An experiment's work as a plan of units: plain data that any process can compute.

A `Unit` names one piece of an experiment's work (one seed of one configuration): a
module-level function (`fn`, as `"module:function"`), its plain-JSON arguments (`args`), and
what it needs (`threads` CPU threads, a GPU or not). `compute(unit)` imports the function and
calls it with the arguments, in whatever process it runs: on the driver (the local executor)
or on a Ray worker (`implicit_em.report.running.executors`). A unit function is pure given its
arguments (the seed among them): the same arguments give the same numbers in another process.
Its value comes back as JSON (the round trip is taken here, so a fresh value and a cached one
are the same), with its wall seconds, its CPU seconds (`usage.cpu_clock`: the process's
threads and the worker processes it joined), the host, device and machine line it ran on, and
the warnings it raised (which the driver writes to a log file, not the console); the tracer's
alarms raised inside a unit stay records (`alarms_off_console`).
"""

from __future__ import annotations

import importlib
import json
import logging
import platform
import re
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from implicit_em.report.running.files import json_default
from implicit_em.report.running.usage import cpu_clock, machine_line

__all__ = [
    "Done",
    "Unit",
    "alarms_off_console",
    "check_name",
    "compute",
    "function_path",
    "resolve",
    "warning_lines",
]

_NAME = re.compile(r"[A-Za-z0-9.=+-][A-Za-z0-9_.=+-]*")


def check_name(name: str) -> str:
    """`name` when it can be a unit's file name (`ValueError` otherwise)."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"unit name must be letters, digits and _.=+- (not starting with _), got {name!r}"
        )
    return name


def function_path(fn: Callable[..., Any]) -> str:
    """The importable `"module:function"` of a module-level function (`ValueError` for a
    lambda, a closure or a method, which another process could not import by name)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or "<" in qualname or "." in qualname:
        raise ValueError(f"a unit function must be module-level, got {fn!r}")
    return f"{module}:{qualname}"


def resolve(path: str) -> Callable[..., Any]:
    """The function named by `"module:function"`."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def as_json(value: Any) -> Any:
    """`value` after a JSON round trip (NaN and infinities kept, tensors and arrays as lists)."""
    return json.loads(json.dumps(value, allow_nan=True, default=json_default))


@dataclass(frozen=True)
class Unit:
    """One unit of an experiment's work.

    Attributes
    ----------
    name : str
        Its name within the experiment (`seed3`, `ls0.1-seed2`): the file its value is kept in.
    fn : str or callable
        A module-level function, stored as its importable `"module:function"`.
    args : mapping
        Its keyword arguments, plain JSON (they travel to the worker as they are).
    threads : int
        CPU threads it uses (the worker sets torch's thread count to it).
    gpu : bool
        Whether it runs on a GPU (`args` then name the device).
    """

    name: str
    fn: str | Callable[..., Any]
    args: Mapping[str, Any] = field(default_factory=dict)
    threads: int = 1
    gpu: bool = False

    def __post_init__(self) -> None:
        check_name(self.name)
        if callable(self.fn):
            object.__setattr__(self, "fn", function_path(self.fn))
        if ":" not in self.fn:
            raise ValueError(f"unit {self.name}: fn must be 'module:function', got {self.fn!r}")
        if self.threads < 1:
            raise ValueError(f"unit {self.name}: threads must be at least 1, got {self.threads}")
        if as_json(dict(self.args)) != dict(self.args):
            raise ValueError(f"unit {self.name}: args must be plain JSON")

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "fn": self.fn,
            "args": dict(self.args),
            "threads": self.threads,
            "gpu": self.gpu,
        }


@dataclass(frozen=True)
class Done:
    """A computed unit: its JSON `value` (None when it raised: `error` is then the traceback),
    its wall `seconds`, the `host` and `device` it ran on, its `cpu_seconds`
    (`usage.cpu_clock`) and the `machine` line of the process (`usage.machine_line`); the last
    two are None where they were not measured (a unit whose worker was lost)."""

    name: str
    value: Any
    seconds: float
    host: str
    device: str
    warnings: tuple[str, ...] = ()
    error: str | None = None
    cpu_seconds: float | None = None
    machine: str | None = None

    @property
    def place(self) -> dict[str, str]:
        """Where it ran, as the units' folder keeps it: host and device, and the machine line
        where it was read."""
        where = {"host": self.host, "device": self.device}
        return where if self.machine is None else {**where, "machine": self.machine}


def _device(args: Mapping[str, Any]) -> str:
    config = args.get("config")
    device = args.get("device") or (config.get("device") if isinstance(config, dict) else None)
    return str(device or "cpu")


def warning_lines(caught: Iterable[warnings.WarningMessage]) -> tuple[str, ...]:
    """Each distinct warning once, on one line, with how often it was raised."""
    counts = Counter(
        " ".join(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})".split())
        for w in caught
    )
    return tuple(line if n == 1 else f"{line} ({n} times)" for line, n in counts.items())


@contextmanager
def alarms_off_console() -> Iterator[None]:
    """Keep the tracer's alarms off the console: no `CollapseWarning`, no log line from the
    `implicit_em.trace` logger. The alarms are still raised and recorded (`Tracer.alarms`)."""
    from implicit_em.trace.alarms import CollapseWarning

    trace_log = logging.getLogger("implicit_em.trace")
    disabled = trace_log.disabled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollapseWarning)
        trace_log.disabled = True
        try:
            yield
        finally:
            trace_log.disabled = disabled


def compute(unit: Unit) -> Done:
    """Compute `unit` in this process; an exception becomes a `Done` with its traceback (a
    killed process is the executor's to retry, not this function's)."""
    start, clock = perf_counter(), cpu_clock()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            with alarms_off_console():
                value, error = as_json(resolve(str(unit.fn))(**unit.args)), None
        except Exception:
            value, error = None, traceback.format_exc()
    seconds, cpu_seconds = perf_counter() - start, cpu_clock() - clock
    device = _device(unit.args)
    return Done(
        unit.name,
        value,
        seconds,
        platform.node(),
        device,
        warning_lines(caught),
        error,
        cpu_seconds,
        machine_line(device),
    )

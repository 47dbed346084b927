"""Checkpoints of a wind-tunnel run: atomic writes, resumption, refusal of another configuration.

A checkpoint holds the model, the optimizer, the state of the training-data generator and the
run's `Progress` (step, curves, elapsed time, trace records, weight snapshots). Everything
random after initialization comes from that generator, so a run resumed from a checkpoint
reproduces the uninterrupted run exactly. Files are written to a temporary name and renamed,
so a kill never leaves half a checkpoint. A checkpoint or result written for another
configuration is refused with the differing keys named: checkpoints are never mixed.

Every file written here holds tensors in plain containers only (dicts, lists, tuples, strings,
numbers, booleans, None), and is read with `torch.load(..., weights_only=True)`: nothing in it
is ever unpickled as code. A file holding anything else (a pickled object, which could run code
when loaded) is refused with a `ValueError` naming it, before any of it is used.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "Progress",
    "StopRequest",
    "config_differences",
    "graceful_stop",
    "load_branch",
    "load_checkpoint",
    "load_plain",
    "refuse_other",
    "save_atomic",
    "save_checkpoint",
    "write_json",
]


def _history() -> dict[str, list[float]]:
    return {"step": [], "loss": [], "eval_step": [], "eval_bits_mae": [], "eval_kl": []}


@dataclass
class Progress:
    """What a run has done so far: `step`, the curves (`history`), training seconds summed
    over sessions (`elapsed`), the number of `sessions`, the running training-loss sum and
    count since the last evaluation (`running`), trace records and weight snapshots."""

    history: dict[str, list[float]] = field(default_factory=_history)
    step: int = 0
    elapsed: float = 0.0
    sessions: int = 0
    running: tuple[float, int] = (0.0, 0)
    trace: list[dict[str, Any]] = field(default_factory=list)
    snapshots: dict[str, list[Any]] = field(default_factory=lambda: {"steps": [], "states": []})


_SCALARS = (str, int, float, bool, type(None))
"""The exact types of the plain values a saved state may hold (subclasses such as NumPy's
`float64` or an enum would be pickled by their class, which `load_plain` refuses)."""


def _check_plain(obj: Any, where: str) -> None:
    """Raise `TypeError` naming the first value in `obj` that `load_plain` would refuse."""
    if type(obj) in (dict, OrderedDict):
        for key, value in obj.items():
            _check_plain(key, f"{where} key {key!r}")
            _check_plain(value, f"{where}[{key!r}]")
    elif type(obj) in (list, tuple):
        for i, value in enumerate(obj):
            _check_plain(value, f"{where}[{i}]")
    elif not (type(obj) in _SCALARS or isinstance(obj, torch.Tensor)):
        raise TypeError(
            f"{where} is a {type(obj).__name__}: a saved state holds tensors, dicts, lists, "
            "tuples, strings, numbers, booleans and None only"
        )


def save_atomic(obj: Any, path: Path) -> None:
    """`torch.save` to a temporary file, then rename it to `path`; `TypeError` (nothing written)
    when `obj` holds anything but tensors in plain containers, which `load_plain` would refuse."""
    _check_plain(obj, "the state")
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_plain(path: Path) -> Any:
    """What `save_atomic` wrote at `path`, on the CPU, read with `weights_only=True`.

    Raises
    ------
    ValueError
        One line naming `path` when it holds anything but tensors in plain containers (such
        as a pickled object, which could run code when loaded: it is refused unread), or when
        it is not a readable torch file (empty, truncated).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        named = f" ({found.group(1)})" if found else ""
        raise ValueError(
            f"{path} holds more than tensors and plain data{named}; it is refused unread, as "
            "unpickling it could run code: delete it, or use another --out directory"
        ) from None
    except (EOFError, RuntimeError):
        raise ValueError(
            f"{path} is not a readable torch file (empty or truncated): delete it to start over"
        ) from None


def write_json(obj: Any, path: Path) -> None:
    """Write `obj` as JSON to a temporary file, then rename it to `path`."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def config_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys (dotted for nested dictionaries) whose values differ between two configurations."""
    keys = sorted(set(old) | set(new))
    out = []
    for key in keys:
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, f"{prefix}{key}.")
        elif a != b or (key in old) != (key in new):
            out.append(f"{prefix}{key}")
    return out


def refuse_other(path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Raise `ValueError` naming the differing keys if `path` belongs to another configuration."""
    if old != new:
        diff = ", ".join(config_differences(old, new))
        raise ValueError(
            f"{path} belongs to a different configuration (differs in: {diff}); it is never "
            "resumed with another one: use another --out directory or delete it to start over"
        )


def save_checkpoint(
    path: Path,
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: torch.Generator,
    progress: Progress,
) -> None:
    """Write the whole training state to `path`, atomically."""
    save_atomic(
        {
            "config": config,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "data_rng": data.get_state(),
            "history": progress.history,
            "step": progress.step,
            "elapsed": progress.elapsed,
            "sessions": progress.sessions,
            "running": progress.running,
            "trace": progress.trace,
            "snapshots": progress.snapshots,
        },
        path,
    )


def load_checkpoint(
    path: Path,
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: torch.Generator,
) -> Progress:
    """Restore the state saved at `path` into `model`, `optimizer` and `data`; its progress.

    A fresh `Progress` when there is no checkpoint; `ValueError` when the checkpoint belongs to
    another configuration or is refused by `load_plain` (nothing is restored then).
    """
    if not path.exists():
        return Progress()
    state = load_plain(path)
    refuse_other(path, state["config"], config)
    return _restore(state, model, optimizer, data, state["elapsed"], state["sessions"])


def load_branch(
    path: Path,
    config: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: torch.Generator,
) -> Progress:
    """Start an intervention from the state of its unfrozen run saved at `path`.

    The saved run's configuration may differ from `config` in `freeze` and `freeze_at`
    only, and its step must not pass `config["freeze_at"]`: up to that step the two runs are
    the same run, so the branch continues exactly as a run of `config` from scratch would.
    Its elapsed time starts at 0: a branch counts its own training time only.
    """
    state = load_plain(path)
    other = set(config_differences(state["config"], config)) - {"freeze", "freeze_at"}
    if other:
        raise ValueError(f"{path} is not a branch point of this run (differs in: {sorted(other)})")
    if state["step"] > config["freeze_at"]:
        raise ValueError(f"{path} is at step {state['step']}, past freeze_at={config['freeze_at']}")
    return _restore(state, model, optimizer, data, elapsed=0.0, sessions=0)


def _restore(
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: torch.Generator,
    elapsed: float,
    sessions: int,
) -> Progress:
    """Load a saved `state` into `model`, `optimizer` and `data`; its progress, with the
    given `elapsed` time and `sessions` count."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    data.set_state(state["data_rng"])
    return Progress(
        history=state["history"],
        step=state["step"],
        elapsed=elapsed,
        sessions=sessions,
        running=tuple(state["running"]),
        trace=state["trace"],
        snapshots=state["snapshots"],
    )


class StopRequest:
    """Set by SIGINT/SIGTERM; the training loop stops at the next step boundary."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: object) -> None:
        self.requested = True


@contextmanager
def graceful_stop() -> Iterator[StopRequest]:
    """Catch SIGINT/SIGTERM into a `StopRequest` while the block runs (main thread only)."""
    stop = StopRequest()
    try:
        previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals cannot be caught here
        yield stop
        return
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

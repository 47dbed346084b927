"""What a unit used besides its wall time: CPU seconds, and the machine it ran on.

`cpu_clock()` is the process's CPU seconds so far: user + system time of every thread of this
process (`os.times().user`, `.system`) plus that of the child processes it has waited for
(`.children_user`, `.children_system`). Its difference across a unit is the unit's CPU
seconds, threads and worker processes included; a child process counts once it has been
joined (a process pool counts when it is shut down), never while it still runs.

`machine_line(device)` is the machine line of this process (`implicit_em.machine.summary`:
CPU model, instruction set, cores, torch threads and BLAS, device), read once per process,
device and torch thread count, so that recording it costs a unit nothing after the first.
"""

from __future__ import annotations

import os
from functools import cache

import torch

from implicit_em.machine import summary

__all__ = ["cpu_clock", "machine_line"]


def cpu_clock() -> float:
    """CPU seconds of this process and its joined children so far."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@cache
def _line(device: str, threads: int) -> str | None:
    try:
        return summary(device)
    except (RuntimeError, ValueError):
        return None  # not a device torch knows: no line rather than a wrong one


def machine_line(device: str) -> str | None:
    """The machine line of this process for `device` with torch's current thread count (None
    when `device` is not one torch can name)."""
    return _line(device, torch.get_num_threads())

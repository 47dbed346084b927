"""Data-parallel fitting under `torch.distributed`: every rank streams its own shard.

The step rules accumulate only *sums* (sufficient statistics or gradients, with the
log-likelihood and the sample count), so a pass over the concatenated data is one all-reduce
(`SUM`) of those sums; the re-seeding candidates are gathered. The concatenated data is the
shards in rank order (rank 0's rows first). The initialization sample is drawn from those
global rows with one random state (rank 0's, broadcast) and its rows are gathered, so every
rank computes the start that one process computes on the concatenated data; the start is then
broadcast from rank 0. Launch with `torchrun`; gloo on CPU, NCCL on GPU.

Whether a fit takes part is its `distributed` setting (`collectives`): `"auto"` joins an
initialized process group of more than one process, `True` requires an initialized group,
`False` keeps the fit local. Outside such a fit (and with one process) every collective here
is the identity.

The tensors handed to the latest collectives are kept referenced here (those of the last four
calls: a pass's all-reduce and gathers), and a process that ran one waits 50 ms at exit, before the interpreter starts tearing down. Without
this, a 2-process `gd` or `adam` fit on two busy cores aborted at exit in about a quarter of
the runs ("terminate called without an active exception"): a gloo worker thread destroys a
finished collective's work object shortly after the call returns (a barrier's work releases the
earlier works it waited on), and if the tensors' Python objects are already gone, releasing
them takes the GIL, which a thread cannot take once the interpreter is finalizing. Held, the
tensors' last release is the main thread's; the wait lets the workers finish first (no abort in
60 such runs).
"""

from __future__ import annotations

import atexit
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields, replace
from functools import wraps
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from implicit_em.mixture.parameters import Mixture

__all__ = [
    "all_gather_rows",
    "all_gather_varying_rows",
    "all_reduce_sums",
    "broadcast_mixture",
    "collectives",
    "gather_global_rows",
    "group_is_up",
    "is_distributed",
    "is_first_rank",
    "resolve",
    "share_random_state",
    "uses_collectives",
]

_ACTIVE: ContextVar[bool] = ContextVar("implicit_em_mixture_collectives", default=False)
"""Whether the running fit takes part in the process group's collectives."""

_HELD: deque[tuple[Tensor, ...]] = deque(maxlen=4)
"""The tensors of the latest collective calls (see the module docstring)."""

_EXIT_GRACE_S = 0.05


def _hold(*tensors: Tensor) -> None:
    """Keep the tensors of one collective call referenced; the first call registers the wait
    at exit."""
    if not _HELD:
        atexit.register(time.sleep, _EXIT_GRACE_S)
    _HELD.append(tensors)


def group_is_up() -> bool:
    """True under an initialized process group with more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def resolve(setting: Any) -> bool:
    """Whether a fit with `distributed=setting` runs the collectives.

    `"auto"`: when a process group of more than one rank is initialized; `True`: always, and
    the group must be initialized (`ValueError` otherwise); `False`: never. Any other value
    gives False here and is refused by the estimator's parameter validation.
    """
    if isinstance(setting, (bool, np.bool_)):
        if setting and not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "distributed=True needs an initialized torch.distributed process group "
                "(call torch.distributed.init_process_group first, e.g. under torchrun)"
            )
        return bool(setting)
    return setting == "auto" and group_is_up()


@contextmanager
def collectives(enabled: bool) -> Iterator[None]:
    """Within the block, the functions here run their collectives when `enabled`."""
    token = _ACTIVE.set(enabled)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def uses_collectives(method: _Method) -> _Method:
    """Run an estimator method inside `collectives(resolve(self.distributed))`."""

    @wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with collectives(resolve(self.distributed)):
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


def is_distributed() -> bool:
    """True inside a fit that takes part in a process group of more than one rank."""
    return _ACTIVE.get() and group_is_up()


def is_first_rank() -> bool:
    """True on rank 0, and everywhere outside a distributed fit."""
    return not is_distributed() or dist.get_rank() == 0


def all_reduce_sums(sums: dict[str, Tensor]) -> dict[str, Tensor]:
    """Sum every tensor of `sums` over the ranks, in place (a fixed key order on every rank)."""
    if is_distributed():
        _hold(*sums.values())
        for key in sorted(sums):
            dist.all_reduce(sums[key], op=dist.ReduceOp.SUM)
    return sums


def broadcast_mixture(mixture: Mixture) -> Mixture:
    """Rank 0's parameters on every rank."""
    if not is_distributed():
        return mixture
    tensors = {
        f.name: getattr(mixture, f.name).contiguous().clone()
        for f in fields(mixture)
        if isinstance(getattr(mixture, f.name), Tensor)
    }
    _hold(*tensors.values())
    for value in tensors.values():
        dist.broadcast(value, src=0)
    return replace(mixture, **tensors)


def all_gather_rows(rows: Tensor) -> Tensor:
    """Concatenate every rank's `rows` (the same shape on every rank) along axis 0."""
    if not is_distributed():
        return rows
    parts = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    rows = rows.contiguous()
    _hold(*parts, rows)
    dist.all_gather(parts, rows)
    return torch.cat(parts, dim=0)


def _backend_device() -> torch.device:
    """Where the process group's collectives take tensors: the current GPU under NCCL."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _row_counts(n_rows: int) -> list[int]:
    """Every rank's number of rows, in rank order."""
    count = torch.tensor([n_rows], dtype=torch.int64, device=_backend_device())
    return [int(c) for c in all_gather_rows(count)]


def all_gather_varying_rows(rows: Tensor) -> Tensor:
    """Concatenate every rank's `rows` (`[n_r, D]`, `n_r` may differ) along axis 0, in rank
    order."""
    if not is_distributed():
        return rows
    counts = _row_counts(rows.shape[0])
    padded = rows.new_zeros((max(counts), *rows.shape[1:]))
    padded[: rows.shape[0]] = rows
    gathered = all_gather_rows(padded)
    width = max(counts)
    return torch.cat([gathered[r * width : r * width + n] for r, n in enumerate(counts)])


def share_random_state(rng: np.random.RandomState) -> np.random.RandomState:
    """Set `rng` to rank 0's state on every rank, so that the ranks draw alike."""
    if is_distributed():
        state = [rng.get_state() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(state, src=0)
        rng.set_state(state[0])
    return rng


def gather_global_rows(x: np.ndarray, pick: Callable[[int], np.ndarray | None]) -> np.ndarray:
    r"""Rows of the concatenated data (the shards in rank order), as float64, on every rank.

    `pick(n)` gives the sorted global indices to take out of $n$ rows in all, or None for
    all of them; it must give the same answer on every rank (draw from a shared random
    state). Each rank contributes the picked rows of its shard `x`; without a distributed
    fit this is `x[pick(len(x))]`, and `x` itself (not a copy) when it is writeable float64
    and every row is picked: the caller reads the rows, never writes them.
    """
    if not is_distributed():
        index = pick(x.shape[0])
        rows = np.asarray(x if index is None else x[index], dtype=np.float64)
        return rows if rows.flags.writeable else rows.copy()
    counts = _row_counts(x.shape[0])
    total, offset = sum(counts), sum(counts[: dist.get_rank()])
    index = pick(total)
    if index is not None:
        x = x[index[(index >= offset) & (index < offset + x.shape[0])] - offset]
    rows = torch.as_tensor(np.array(x, dtype=np.float64), device=_backend_device())
    return all_gather_varying_rows(rows).cpu().numpy()

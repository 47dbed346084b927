"""Data-parallel fitting under `torch.distributed`: every rank streams its own shard.

The step rules accumulate only *sums* (sufficient statistics or gradients, with the
log-likelihood and the sample count), so a pass over the concatenated data is one all-reduce
(`SUM`) of those sums; the initial parameters are broadcast from rank 0 and the re-seeding
candidates are gathered. Launch with `torchrun`; gloo on CPU, NCCL on GPU. Without an
initialized process group (or with one process) every function here is the identity.

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
from dataclasses import fields, replace

import torch
import torch.distributed as dist
from torch import Tensor

from implicit_em.mixture.parameters import Mixture

__all__ = ["all_gather_rows", "all_reduce_sums", "broadcast_mixture", "is_distributed"]

_HELD: deque[tuple[Tensor, ...]] = deque(maxlen=4)
"""The tensors of the latest collective calls (see the module docstring)."""

_EXIT_GRACE_S = 0.05


def _hold(*tensors: Tensor) -> None:
    """Keep the tensors of one collective call referenced; the first call registers the wait
    at exit."""
    if not _HELD:
        atexit.register(time.sleep, _EXIT_GRACE_S)
    _HELD.append(tensors)


def is_distributed() -> bool:
    """True under an initialized process group with more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


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

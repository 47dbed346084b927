"""Data-parallel fitting under ``torch.distributed``: every rank streams its own shard.

The step rules accumulate only *sums* (sufficient statistics or gradients, with the
log-likelihood and the sample count), so a pass over the concatenated data is one all-reduce
(``SUM``) of those sums; the initial parameters are broadcast from rank 0 and the re-seeding
candidates are gathered. Launch with ``torchrun``; gloo on CPU, NCCL on GPU. Without an
initialized process group (or with one process) every function here is the identity.
"""

from __future__ import annotations

from dataclasses import fields, replace

import torch
import torch.distributed as dist
from torch import Tensor

from implicit_em.mixture.parameters import Mixture

__all__ = ["all_gather_rows", "all_reduce_sums", "broadcast_mixture", "is_distributed"]


def is_distributed() -> bool:
    """True under an initialized process group with more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sums(sums: dict[str, Tensor]) -> dict[str, Tensor]:
    """Sum every tensor of ``sums`` over the ranks, in place (a fixed key order on every rank)."""
    if is_distributed():
        for key in sorted(sums):
            dist.all_reduce(sums[key], op=dist.ReduceOp.SUM)
    return sums


def broadcast_mixture(mixture: Mixture) -> Mixture:
    """Rank 0's parameters on every rank."""
    if not is_distributed():
        return mixture
    tensors = {}
    for f in fields(mixture):
        value = getattr(mixture, f.name)
        if isinstance(value, Tensor):
            value = value.contiguous().clone()
            dist.broadcast(value, src=0)
            tensors[f.name] = value
    return replace(mixture, **tensors)


def all_gather_rows(rows: Tensor) -> Tensor:
    """Concatenate every rank's ``rows`` (the same shape on every rank) along axis 0."""
    if not is_distributed():
        return rows
    parts = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, rows.contiguous())
    return torch.cat(parts, dim=0)

"""The wind-tunnel tasks' common parts: a `Batch` of sequences with their supervision, the
`Task` protocol of a sampler, and uniform draws on the simplex (see `tasks` for the shapes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
from torch import Tensor

__all__ = ["Batch", "Task", "uniform_simplex"]


@dataclass(frozen=True)
class Batch:
    """One batch of sequences with their supervision (shapes in `tasks`' module docstring)."""

    tokens: Tensor
    mask: Tensor
    target: Tensor
    posterior: Tensor

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on `device`."""
        return Batch(*(t.to(device) for t in (self.tokens, self.mask, self.target, self.posterior)))


class Task(Protocol):
    """A sampler of sequences with exact posteriors.

    `vocab_size` tokens, sequences of `seq_len` tokens, posteriors over `n_classes`.
    """

    name: ClassVar[str]
    vocab_size: int
    seq_len: int
    n_classes: int

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch: ...


def uniform_simplex(shape: tuple[int, ...], n: int, generator: torch.Generator) -> Tensor:
    r"""Draws of $\text{Dirichlet}(1, \dots, 1)$ (uniform on the simplex), `[*shape, n]`.

    Normalized i.i.d. exponentials $-\log U$, so that `generator` alone fixes the draw.
    """
    u = torch.rand((*shape, n), generator=generator, dtype=torch.float64)
    e = -torch.log1p(-u)
    return e / e.sum(dim=-1, keepdim=True)

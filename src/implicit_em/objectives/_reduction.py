"""What every objective shares: the reduction over the samples."""

from __future__ import annotations

from typing import Literal

from torch import Tensor

__all__ = ["Reduction", "reduce"]

Reduction = Literal["mean", "sum", "none"]
"""How a per-sample loss is reduced: its mean, its sum, or kept per sample."""


def reduce(loss: Tensor, reduction: Reduction) -> Tensor:
    """`loss` reduced by `reduction`; a ValueError naming the argument otherwise."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")

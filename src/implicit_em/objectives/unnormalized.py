r"""Unnormalized comparators: no partition function, no competition (C7, C8).

Each component's loss depends on its own distance alone, so the Hessian in `d` is diagonal and
no responsibility appears in the gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from implicit_em.core import check_component_axis
from implicit_em.objectives._reduction import Reduction, reduce
from implicit_em.objectives.classification import soft_targets

__all__ = ["CorrentropyLoss", "SigmoidBCE", "correntropy", "sigmoid_bce"]


def correntropy(d: Tensor, sigma: float, dim: int = -1, reduction: Reduction = "mean") -> Tensor:
    r"""Correntropy-induced loss $\sum_j \bigl(1 - \exp(-d_j^2/\sigma^2)\bigr)$ (C7).

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    sigma : float
        The kernel width $\sigma > 0$.
    dim : int, default=-1
        The component axis.
    reduction : {"mean", "sum", "none"}, default="mean"
        Reduction over the remaining axes.

    Returns
    -------
    Tensor
        The loss: a scalar, or per sample with `reduction="none"`.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `sigma` <= 0, `dim` is out of range or `reduction` is unknown.

    Notes
    -----
    Gradient: $\partial/\partial d_j = \tfrac{2 d_j}{\sigma^2}\exp(-d_j^2/\sigma^2)$, which
    depends on $d_j$ alone: the Hessian is diagonal, far outliers get a vanishing gradient
    (robustness) and no component competes with another (no responsibility).
    """
    dim = check_component_axis(d, dim)
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return reduce((1.0 - torch.exp(-(d**2) / sigma**2)).sum(dim=dim), reduction)


class CorrentropyLoss(nn.Module):
    r"""Module form of [correntropy][]: `forward(d)`.

    Parameters
    ----------
    sigma : float, default=1.0
        The kernel width $\sigma > 0$.
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [correntropy][].

    Raises
    ------
    ValueError
        If `sigma` <= 0.
    """

    def __init__(self, sigma: float = 1.0, reduction: Reduction = "mean") -> None:
        super().__init__()
        if not float(sigma) > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.sigma = float(sigma)
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor) -> Tensor:
        return correntropy(d, self.sigma, reduction=self.reduction)


def sigmoid_bce(
    d: Tensor,
    target: Tensor,
    bias: Tensor | float = 0.0,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Independent per-component sigmoids with binary cross-entropy (C8).

    Each component $j$ predicts $p_j = \sigma(b - d_j)$ on its own, with loss
    $\sum_j -t_j\log p_j - (1-t_j)\log(1-p_j)$.

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    target : Tensor
        Class indices (one-hot targets) or a float tensor of `d`'s shape in $[0,1]$
        (multi-label or soft).
    bias : Tensor or float, default=0.0
        The shared bias $b$.
    dim : int, default=-1
        The component axis.
    reduction : {"mean", "sum", "none"}, default="mean"
        Reduction over the remaining axes.

    Returns
    -------
    Tensor
        The loss: a scalar, or per sample with `reduction="none"`.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor or `target` holds neither indices nor floats.
    ValueError
        If the target does not fit `d` or lies outside $[0, 1]$, or `reduction` is unknown.

    Notes
    -----
    Gradient: $\partial/\partial d_j = t_j - \sigma(b - d_j)$: component $j$ alone,
    so the Hessian in `d` is diagonal, $\sigma'(b-d_j)$, and there is no responsibility.
    """
    dim = check_component_axis(d, dim)
    if isinstance(target, Tensor) and target.is_floating_point():
        if target.shape != d.shape:
            raise ValueError(
                f"float target must have d's shape {tuple(d.shape)}, got {tuple(target.shape)}"
            )
        if bool(((target < 0) | (target > 1)).any()):
            raise ValueError("float target must lie in [0, 1]")
        t = target.to(d.dtype)
    else:
        t = soft_targets(d, target, dim=dim)
    logits = torch.as_tensor(bias, dtype=d.dtype, device=d.device) - d
    per_component = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, t, reduction="none"
    )
    return reduce(per_component.sum(dim=dim), reduction)


class SigmoidBCE(nn.Module):
    r"""Module form of [sigmoid_bce][] with a shared bias $b$: `forward(d, target)`.

    Parameters
    ----------
    bias : float, default=0.0
        The initial shared bias $b$.
    learnable_bias : bool, default=False
        Make $b$ a parameter (otherwise a buffer).
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [sigmoid_bce][].
    """

    def __init__(
        self, bias: float = 0.0, learnable_bias: bool = False, reduction: Reduction = "mean"
    ) -> None:
        super().__init__()
        value = torch.tensor(float(bias))
        if learnable_bias:
            self.bias = nn.Parameter(value)
        else:
            self.register_buffer("bias", value)
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor, target: Tensor) -> Tensor:
        return sigmoid_bce(d, target, bias=self.bias.to(d.dtype), reduction=self.reduction)

r"""The constrained regime: cross-entropy over distances and its target distribution.

$d_y + \log\sum_k e^{-d_k}$, with $\partial/\partial d_j = t_j - r_j$ per sample (C6, R4).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from implicit_em.core import check_component_axis, log_responsibilities
from implicit_em.hook_points import hook_point
from implicit_em.objectives._reduction import Reduction, reduce

__all__ = ["CrossEntropy", "cross_entropy", "soft_targets"]


def soft_targets(d: Tensor, target: Tensor, label_smoothing: float = 0.0, dim: int = -1) -> Tensor:
    r"""The target distribution $t$ used by [cross_entropy][], shaped like `d`.

    The one place a class index $y$ becomes its one-hot distribution $t_j = 1[j = y]$ (and a
    probability target is checked): every objective over a target distribution reads $t$ here.

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    target : Tensor
        Integer class indices (`d`'s shape without `dim`) or a probability tensor of `d`'s
        shape.
    label_smoothing : float, default=0.0
        $\varepsilon \in [0, 1]$: the target is mixed with the uniform distribution,
        $t \leftarrow (1-\varepsilon)\,t + \varepsilon/K$.
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        $t$, of `d`'s shape and dtype.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor or `target` is neither class indices nor probabilities.
    ValueError
        If `label_smoothing` is outside $[0, 1]$, class indices are out of range, or a soft
        target has the wrong shape, a negative entry or does not sum to 1.
    """
    dim = check_component_axis(d, dim)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    k = d.shape[dim]
    if not isinstance(target, Tensor):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.is_floating_point():
        if target.shape != d.shape:
            raise ValueError(
                f"soft target must have d's shape {tuple(d.shape)}, got {tuple(target.shape)}"
            )
        if bool((target < 0).any()):
            raise ValueError("soft target must be non-negative (a probability vector per sample)")
        total = target.sum(dim=dim)
        if not torch.allclose(total, torch.ones_like(total), atol=1e-3):
            raise ValueError("soft target must sum to 1 along the component axis")
        t = target.to(d.dtype)
    else:
        if target.dtype == torch.bool or target.is_complex():
            raise TypeError(f"target must hold integer class indices, got dtype {target.dtype}")
        expected = d.shape[:dim] + d.shape[dim + 1 :]
        if target.shape != expected:
            raise ValueError(
                f"class-index target must have shape {tuple(expected)} (d's shape without the "
                f"component axis), got {tuple(target.shape)}"
            )
        if target.numel() and (int(target.min()) < 0 or int(target.max()) >= k):
            raise ValueError(
                f"target class indices must lie in [0, {k - 1}], got range "
                f"[{int(target.min())}, {int(target.max())}]"
            )
        t = torch.zeros_like(d).scatter_(dim, target.long().unsqueeze(dim), 1.0)
    if label_smoothing:
        t = (1.0 - label_smoothing) * t + label_smoothing / k
    return t


def cross_entropy(
    d: Tensor,
    target: Tensor,
    label_smoothing: float = 0.0,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Cross-entropy over distances $-\sum_j t_j\log r_j$, for a label $d_y + \log\sum_k e^{-d_k}$.

    The constrained regime: supervision clamps the target's responsibility while the wrong
    classes still compete through $r$ (C6). Equal to
    `F.cross_entropy(-d, target, label_smoothing=...)`.

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    target : Tensor
        Class indices (`d`'s shape without `dim`) or probabilities (`d`'s shape).
    label_smoothing : float, default=0.0
        $\varepsilon \in [0, 1]$ (a partial clamp, C14b).
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
        If `d` is not a floating tensor or `target` is neither class indices nor probabilities.
    ValueError
        If the target does not fit `d` (see [soft_targets][]) or `reduction` is unknown.

    Notes
    -----
    Gradient per sample: $\partial/\partial d_j = t_j - r_j$; for a hard label
    $1[j=y] - r_j$ (R4). Components with $d_j=+\infty$ and $t_j = 0$ contribute 0.
    """
    dim = check_component_axis(d, dim)
    t = soft_targets(d, target, label_smoothing, dim)
    log_r = log_responsibilities(d, dim=dim)
    # t_j log r_j with the convention 0 log 0 = 0 (also 0 * -inf for excluded components).
    safe_log_r = torch.where(t > 0, log_r, torch.zeros_like(log_r))
    loss = -(t * safe_log_r).sum(dim=dim)
    hook_point("cross_entropy", loss, d=d, target=t, dim=dim)
    return reduce(loss, reduction)


class CrossEntropy(nn.Module):
    r"""Module form of [cross_entropy][]: `forward(d, target)`.

    Parameters
    ----------
    label_smoothing : float, default=0.0
        As in [cross_entropy][].
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [cross_entropy][].

    Raises
    ------
    ValueError
        If `label_smoothing` is outside $[0, 1]$.
    """

    def __init__(self, label_smoothing: float = 0.0, reduction: Reduction = "mean") -> None:
        super().__init__()
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor, target: Tensor) -> Tensor:
        return cross_entropy(d, target, self.label_smoothing, reduction=self.reduction)

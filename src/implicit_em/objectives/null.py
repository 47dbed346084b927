r"""The null ("none of the above") component of the normalized objectives (C10, C14c).

$r_0 = e^{-d_0} / (e^{-d_0} + \sum_j \pi_j e^{-d_j}) = \sigma(-d_0 - L)$.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from implicit_em.core import check_component_axis, lse

__all__ = ["NullComponent", "append_null", "null_responsibility"]


def append_null(d: Tensor, d0: Tensor | float, dim: int = -1) -> Tensor:
    r"""Append a null component with distance $d_0$ as the last component (index $K$).

    The extended distances $[d_1, \dots, d_K, d_0]$ go into [mixture_nll][] (the
    unsupervised regime: $\partial/\partial d_0 = +r_0$) or [cross_entropy][] with
    class index $K$ meaning "none of the above" (the constrained regime:
    $\partial/\partial d_0 = 1[y=K] - r_0$).

    Parameters
    ----------
    d : Tensor
        Distances of the real components, component axis at `dim`.
    d0 : Tensor or float
        The null distance: a scalar, or broadcastable to `d` without the component axis (a
        per-input threshold).
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        `d` with one more component along `dim`.

    Raises
    ------
    TypeError
        If `d` or `d0` is not floating.
    ValueError
        If `d0` does not broadcast to `d`'s batch shape.
    """
    dim = check_component_axis(d, dim)
    d0 = torch.as_tensor(d0, dtype=d.dtype, device=d.device)
    if not d0.is_floating_point():
        raise TypeError(f"d0 must be a float distance, got dtype {d0.dtype}")
    batch_shape = d.shape[:dim] + d.shape[dim + 1 :]
    try:
        null = torch.broadcast_to(d0, batch_shape).unsqueeze(dim)
    except RuntimeError as err:
        raise ValueError(
            f"d0 with shape {tuple(d0.shape)} does not broadcast to d's batch shape "
            f"{tuple(batch_shape)}"
        ) from err
    return torch.cat([d, null], dim=dim)


def null_responsibility(
    d: Tensor, d0: Tensor | float, log_prior: Tensor | None = None, dim: int = -1
) -> Tensor:
    r"""Rejection responsibility $r_0 = e^{-d_0} / (e^{-d_0} + \sum_j \pi_j e^{-d_j})$.

    Equivalently $r_0 = \sigma(-d_0 - L(d))$ with $L$ the [lse][implicit_em.core.lse]
    of the real components: the input is rejected when no component explains it better than the
    threshold $d_0$ (the open-set answer to C10).

    Parameters
    ----------
    d : Tensor
        Distances of the real components, component axis at `dim`.
    d0 : Tensor or float
        The null distance, broadcastable to `d` without the component axis.
    log_prior : Tensor or None, default=None
        Log mixing weights of the real components, broadcastable to `d`.
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        $r_0$, of `d`'s shape without the component axis.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `dim` is out of range or the component axis is empty.
    """
    dim = check_component_axis(d, dim)
    d0 = torch.as_tensor(d0, dtype=d.dtype, device=d.device)
    return torch.sigmoid(-d0 - lse(d, dim=dim, log_prior=log_prior))


class NullComponent(nn.Module):
    r"""A "none of the above" component with fixed or learnable distance $d_0$.

    `forward(d)` returns [append_null][] of `d` (index $K$ is the null component), so it
    composes with [MixtureNLL][] and [CrossEntropy][]; [responsibility][] gives
    $r_0$. The learnable distance receives $\partial/\partial d_0 = +r_0$ under the
    mixture NLL and $1[y=K] - r_0$ under cross-entropy.

    Parameters
    ----------
    d0 : float, default=0.0
        The initial null distance.
    learnable : bool, default=True
        Make $d_0$ a parameter (otherwise a buffer).
    """

    def __init__(self, d0: float = 0.0, learnable: bool = True) -> None:
        super().__init__()
        value = torch.tensor(float(d0))
        if learnable:
            self.d0 = nn.Parameter(value)
        else:
            self.register_buffer("d0", value)

    def forward(self, d: Tensor) -> Tensor:
        return append_null(d, self.d0.to(d.dtype))

    def responsibility(self, d: Tensor, log_prior: Tensor | None = None) -> Tensor:
        """The rejection responsibility $r_0$ for distances `d` of the real components.

        See [null_responsibility][implicit_em.objectives.null_responsibility].
        """
        return null_responsibility(d, self.d0.to(d.dtype), log_prior=log_prior)

r"""The unsupervised regime: the mixture negative log-likelihood over distances.

$-\log\sum_j \pi_j e^{-d_j + v_j}$, with $\partial/\partial d_j = +r_j$ per sample (C4, R4).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from implicit_em.core import check_component_axis, lse
from implicit_em.hook_points import hook_point
from implicit_em.objectives._reduction import Reduction, reduce

__all__ = ["MixtureNLL", "mixture_nll"]


def _check_volume(log_det: Tensor | None, d: Tensor) -> None:
    if log_det is None:
        return
    if not isinstance(log_det, Tensor) or not log_det.is_floating_point():
        raise TypeError("log_det must be a floating torch.Tensor of per-component log|det W_j|")
    try:
        shape = torch.broadcast_shapes(log_det.shape, d.shape)
    except RuntimeError:
        shape = None
    if shape != d.shape:
        raise ValueError(
            f"log_det with shape {tuple(log_det.shape)} must broadcast to d's shape "
            f"{tuple(d.shape)} (one log|det W_j| per component)"
        )


def mixture_nll(
    d: Tensor,
    log_prior: Tensor | None = None,
    log_det: Tensor | None = None,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Mixture negative log-likelihood $-\log\sum_j \pi_j \exp(-d_j + \log|\det W_j|)$.

    With $d_j = \tfrac12\lVert W_j(x-\mu_j)\rVert^2$ (a whitened Gaussian component, see
    [implicit_em.distances][]) and the volume term `log_det` this is the Gaussian mixture
    NLL up to the constant $\tfrac D2\log 2\pi$; without `log_det` it is the paper's
    objective $-L$, which has no volume term (m1).

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    log_prior : Tensor or None, default=None
        Log mixing weights $\log\pi$ broadcastable to `d`; uniform if None.
    log_det : Tensor or None, default=None
        Per-component $\log|\det W_j|$, broadcastable to `d`.
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
        If `d`, `log_prior` or `log_det` is not a floating tensor.
    ValueError
        If `dim` is out of range, the component axis is empty, `log_prior` or `log_det` does
        not broadcast to `d`'s shape, or `reduction` is unknown.

    Notes
    -----
    Gradient per sample, with $r_j \propto \pi_j e^{-d_j + \log|\det W_j|}$:

    $$
    \frac{\partial}{\partial d_j} = +r_j, \qquad
    \frac{\partial}{\partial \log|\det W_j|} = -r_j, \qquad
    \frac{\partial}{\partial \log\pi_j} = -r_j ,
    $$

    the first with the sign of the minimized objective (R4).
    """
    dim = check_component_axis(d, dim)
    _check_volume(log_det, d)
    energy = d if log_det is None else d - log_det
    loss = -lse(energy, dim=dim, log_prior=log_prior)
    hook_point("mixture_nll", loss, d=d, log_prior=log_prior, log_det=log_det, dim=dim)
    return reduce(loss, reduction)


class MixtureNLL(nn.Module):
    r"""Module form of [mixture_nll][] holding the mixing weights.

    `forward(d, log_det=None)` returns `mixture_nll(d, log_prior=self.log_prior(), log_det=log_det)`.

    Parameters
    ----------
    n_components : int
        $K$.
    log_prior : Tensor or None, default=None
        Initial log weights, `[K]` (normalized on use); uniform if None.
    learnable_prior : bool, default=False
        If True the weights are a parameter, normalized by `log_softmax` so that $\pi$ stays
        on the simplex; its gradient is $\partial/\partial\,\mathrm{logits}_j = \pi_j - r_j$
        per sample.
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [mixture_nll][].

    Raises
    ------
    ValueError
        If `n_components` < 1 or `log_prior` is not of shape `[K]`.
    """

    def __init__(
        self,
        n_components: int,
        log_prior: Tensor | None = None,
        learnable_prior: bool = False,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        if n_components < 1:
            raise ValueError(f"n_components must be >= 1, got {n_components}")
        logits = torch.zeros(n_components) if log_prior is None else log_prior.detach().clone()
        if logits.shape != (n_components,):
            raise ValueError(
                f"log_prior must have shape ({n_components},), got {tuple(logits.shape)}"
            )
        if learnable_prior:
            self.prior_logits = nn.Parameter(logits)
        else:
            self.register_buffer("prior_logits", logits)
        self.reduction: Reduction = reduction

    def log_prior(self) -> Tensor:
        r"""The normalized log mixing weights $\log\pi$, shape `[K]`."""
        return torch.log_softmax(self.prior_logits, dim=-1)

    def forward(self, d: Tensor, log_det: Tensor | None = None) -> Tensor:
        log_prior = self.log_prior().to(d.dtype)
        return mixture_nll(d, log_prior=log_prior, log_det=log_det, reduction=self.reduction)

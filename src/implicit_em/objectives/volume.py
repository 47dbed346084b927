r"""Batch surrogates of the volume (log-det) term that neural objectives lack (C9, C14a).

The variance penalty is the diagonal of the missing $\log|\det|$, the decorrelation penalty its
off-diagonal; `log_det_penalty` is the term itself, on the batch covariance.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from implicit_em.core import check_component_axis

__all__ = ["VolumeSurrogate", "decorrelation_penalty", "log_det_penalty", "variance_penalty"]


def _check_batch(d: Tensor, name: str = "d") -> None:
    check_component_axis(d, -1, name)
    if d.dim() != 2 or d.shape[0] < 2:
        raise ValueError(
            f"{name} must have shape [B, K] with a batch of B >= 2 samples, got {tuple(d.shape)}"
        )


def _batch_covariance(d: Tensor) -> Tensor:
    """The unbiased covariance `[K, K]` of the rows of `d[B, K]`."""
    centered = d - d.mean(dim=0, keepdim=True)
    return centered.T @ centered / (d.shape[0] - 1)


def variance_penalty(d: Tensor, eps: float = 1e-6) -> Tensor:
    r"""Variance penalty $-\sum_j \log(\operatorname{Var}_b(d_{bj}) + \varepsilon)$ over a batch.

    The diagonal of the missing log-det: a component whose distance no longer varies over the
    batch (it answers every input alike, the first sign of collapse, C9) is penalized without
    bound.

    Parameters
    ----------
    d : Tensor
        Distances `[B, K]` with $B \ge 2$.
    eps : float, default=1e-6
        $\varepsilon$.

    Returns
    -------
    Tensor
        The penalty, a scalar.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `d` is not of shape `[B, K]` with $B \ge 2$.

    Notes
    -----
    Gradient: $\partial/\partial d_{bj} = -\dfrac{2(d_{bj}-\bar d_j)}{(B-1)(\operatorname{Var}_j+\varepsilon)}$.
    """
    _check_batch(d)
    return -torch.log(d.var(dim=0) + eps).sum()


def decorrelation_penalty(d: Tensor, eps: float = 1e-6) -> Tensor:
    r"""Decorrelation penalty $\lVert \operatorname{Corr}(d) - I\rVert_F^2$ over a batch.

    The off-diagonal of the missing log-det: components whose distances are correlated answer
    the same inputs (redundant, a softer collapse).

    Parameters
    ----------
    d : Tensor
        Distances `[B, K]` with $B \ge 2$.
    eps : float, default=1e-6
        Added to each variance before the square root.

    Returns
    -------
    Tensor
        The penalty, a scalar.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `d` is not of shape `[B, K]` with $B \ge 2$.
    """
    _check_batch(d)
    cov = _batch_covariance(d)
    std = torch.sqrt(torch.diagonal(cov) + eps)
    corr = cov / (std[:, None] * std[None, :])
    eye = torch.eye(d.shape[1], dtype=d.dtype, device=d.device)
    return ((corr - eye) ** 2).sum()


def log_det_penalty(d: Tensor, eps: float = 1e-4) -> Tensor:
    r"""Explicit volume term $-\log\det(\operatorname{Cov}_b(d) + \varepsilon I)$ over a batch.

    The batch covariance of the distances is $C = \frac{1}{B-1}\sum_b (d_b - \bar d)(d_b -
    \bar d)^\top$. Its log-det splits into the two surrogates' parts,
    $\log\det C = \sum_j \log C_{jj} + \log\det\operatorname{Corr}(d)$: the penalty is
    the variance penalty plus $-\log\det\operatorname{Corr}(d)$ (at $\varepsilon = 0$). A
    distance map that shrinks or folds the data onto fewer directions is penalized without bound.

    `d` (`[B, K]`, $B \ge 2$) and the errors are those of `variance_penalty`; `eps`
    (default 1e-4) is added to the diagonal, so that a constant unit costs
    $-\log\varepsilon$. Returns the penalty, a scalar, whose gradient is
    $\partial/\partial d_{b} = -\dfrac{2}{B-1}(C + \varepsilon I)^{-1}(d_b - \bar d)$.
    """
    _check_batch(d)
    eye = torch.eye(d.shape[1], dtype=d.dtype, device=d.device)
    return -torch.logdet(_batch_covariance(d) + eps * eye)


class VolumeSurrogate(nn.Module):
    """Both volume surrogates, weighted: `forward(d)` for a batch `d[B, K]`.

    `forward(d)` returns
    `variance_weight * variance_penalty(d) + decorrelation_weight * decorrelation_penalty(d)`
    (see [variance_penalty][] and [decorrelation_penalty][]).

    Parameters
    ----------
    variance_weight : float, default=1.0
        Weight of the variance penalty, >= 0.
    decorrelation_weight : float, default=1.0
        Weight of the decorrelation penalty, >= 0.
    eps : float, default=1e-6
        Passed to both penalties.

    Raises
    ------
    ValueError
        If a weight is negative.
    """

    def __init__(
        self, variance_weight: float = 1.0, decorrelation_weight: float = 1.0, eps: float = 1e-6
    ) -> None:
        super().__init__()
        if variance_weight < 0 or decorrelation_weight < 0:
            raise ValueError("variance_weight and decorrelation_weight must be >= 0")
        self.variance_weight = variance_weight
        self.decorrelation_weight = decorrelation_weight
        self.eps = eps

    def forward(self, d: Tensor) -> Tensor:
        return self.variance_weight * variance_penalty(
            d, self.eps
        ) + self.decorrelation_weight * decorrelation_penalty(d, self.eps)

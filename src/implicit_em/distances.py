r"""Distance layers: ``x[..., D] -> d[..., K]``, each a pure function plus a thin ``nn.Module``.

A distance layer turns an input into one energy per component; an objective from
:mod:`implicit_em.objectives` turns the energies into a loss, and :func:`implicit_em.responsibilities`
into responsibilities.

======================  ========================================================  ==========
layer                   :math:`d_j(x)`                                            volume
======================  ========================================================  ==========
SquaredEuclidean        :math:`\lVert x - \mu_j\rVert^2`                          --
DiagonalMahalanobis     :math:`\tfrac12\lVert e^{s_j}\odot(x-\mu_j)\rVert^2`      :math:`\sum_i s_{ji}`
FullMahalanobis         :math:`\tfrac12\lVert W_j(x-\mu_j)\rVert^2`               :math:`\sum_i\log W_{j,ii}`
AffineDistance          :math:`\lvert w_j^\top x + b_j\rvert` (or ReLU)           --
DotProductEnergy        :math:`-q^\top k_j/\sqrt{E}` (may be negative)            --
======================  ========================================================  ==========

For the Mahalanobis layers :math:`W_j` is a whitening factor (:math:`\Sigma_j^{-1} = W_j^\top W_j`,
lower triangular with a positive diagonal) and ``log_det()`` returns :math:`\log\lvert\det W_j\rvert`,
so that :math:`\exp(-d_j + \log\lvert\det W_j\rvert)` is the Gaussian density up to
:math:`(2\pi)^{-D/2}`; pass it as ``log_det`` to :func:`~implicit_em.objectives.mixture_nll`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "AffineDistance",
    "DiagonalMahalanobis",
    "DotProductEnergy",
    "FullMahalanobis",
    "SquaredEuclidean",
    "affine_distance",
    "diagonal_mahalanobis",
    "dot_product_energy",
    "full_mahalanobis",
    "squared_euclidean",
    "whitening_factor",
]


def _check_input(x: Tensor, features: int, name: str = "x") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got dtype {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != features:
        raise ValueError(f"{name} must have shape [..., {features}], got {tuple(x.shape)}")


def _check_size(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Functional forms
# ---------------------------------------------------------------------------------------------


def squared_euclidean(x: Tensor, prototypes: Tensor) -> Tensor:
    r""":math:`d_j = \lVert x - \mu_j\rVert^2` for ``x[..., D]`` and ``prototypes[K, D]`` -> ``[..., K]``.

    Computed from differences (no :math:`\lVert x\rVert^2 - 2x^\top\mu + \lVert\mu\rVert^2`
    cancellation), so it is exact and never negative.
    Gradient: :math:`\partial d_j/\partial\mu_j = -2(x-\mu_j)`.
    """
    _check_input(x, prototypes.shape[-1])
    diff = x.unsqueeze(-2) - prototypes
    return (diff * diff).sum(dim=-1)


def diagonal_mahalanobis(x: Tensor, means: Tensor, log_scales: Tensor) -> Tensor:
    r""":math:`d_j = \tfrac12\sum_i e^{2 s_{ji}}(x_i-\mu_{ji})^2` for ``means, log_scales [K, D]``.

    :math:`W_j = \operatorname{diag}(e^{s_j})` so :math:`\log|\det W_j| = \sum_i s_{ji}`.
    """
    _check_input(x, means.shape[-1])
    z = (x.unsqueeze(-2) - means) * torch.exp(log_scales)
    return 0.5 * (z * z).sum(dim=-1)


def whitening_factor(raw: Tensor) -> Tensor:
    r"""Lower-triangular :math:`W` with positive diagonal :math:`e^{\mathrm{diag}(raw)}` from ``raw[..., D, D]``."""
    lower = torch.tril(raw, diagonal=-1)
    return lower + torch.diag_embed(torch.exp(torch.diagonal(raw, dim1=-2, dim2=-1)))


def full_mahalanobis(x: Tensor, means: Tensor, factors: Tensor) -> Tensor:
    r""":math:`d_j = \tfrac12\lVert W_j(x-\mu_j)\rVert^2` for ``means [K, D]``, ``factors [K, D, D]``.

    Gradient: :math:`\partial d_j/\partial W_j = z_j (x-\mu_j)^\top` with :math:`z_j = W_j(x-\mu_j)`.
    """
    _check_input(x, means.shape[-1])
    diff = x.unsqueeze(-2) - means  # [..., K, D]
    z = torch.einsum("kde,...ke->...kd", factors, diff)
    return 0.5 * (z * z).sum(dim=-1)


def affine_distance(x: Tensor, weight: Tensor, bias: Tensor, relu: bool = False) -> Tensor:
    r""":math:`d_j = |w_j^\top x + b_j|`, or :math:`\max(0, w_j^\top x + b_j)` with ``relu``.

    The reading "neural outputs are distances" (m3): a linear unit measures a signed distance to
    its hyperplane; the absolute value (or ReLU) makes it a distance :math:`\ge 0`.
    """
    _check_input(x, weight.shape[-1])
    y = torch.nn.functional.linear(x, weight, bias)
    return torch.relu(y) if relu else torch.abs(y)


def dot_product_energy(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    r""":math:`d_{ij} = -q_i^\top k_j \cdot \text{scale}` (default :math:`1/\sqrt{E}`), ``[..., Lq, Lk]``.

    The attention score as an energy, so that ``responsibilities(d)`` is the attention weight.
    Unlike the other layers this energy can be negative; only differences matter to softmax.
    """
    _check_input(q, k.shape[-1], "q")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return -(q @ k.transpose(-2, -1)) * scale


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------


class SquaredEuclidean(nn.Module):
    """Squared Euclidean distance to ``n_components`` learned prototypes (``prototypes[K, D]``)."""

    def __init__(self, in_features: int, n_components: int) -> None:
        super().__init__()
        _check_size("in_features", in_features)
        _check_size("n_components", n_components)
        self.prototypes = nn.Parameter(torch.randn(n_components, in_features))

    def forward(self, x: Tensor) -> Tensor:
        return squared_euclidean(x, self.prototypes)


class DiagonalMahalanobis(nn.Module):
    """Diagonal Mahalanobis distance with per-component log-scales (``W_j = diag(exp(s_j))``)."""

    def __init__(self, in_features: int, n_components: int) -> None:
        super().__init__()
        _check_size("in_features", in_features)
        _check_size("n_components", n_components)
        self.means = nn.Parameter(torch.randn(n_components, in_features))
        self.log_scales = nn.Parameter(torch.zeros(n_components, in_features))

    def log_det(self) -> Tensor:
        r""":math:`\log|\det W_j|`, shape ``[K]``."""
        return self.log_scales.sum(dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        return diagonal_mahalanobis(x, self.means, self.log_scales)


class FullMahalanobis(nn.Module):
    """Full Mahalanobis distance with a lower-triangular whitening factor per component."""

    def __init__(self, in_features: int, n_components: int) -> None:
        super().__init__()
        _check_size("in_features", in_features)
        _check_size("n_components", n_components)
        self.means = nn.Parameter(torch.randn(n_components, in_features))
        self.raw_factors = nn.Parameter(torch.zeros(n_components, in_features, in_features))

    def factors(self) -> Tensor:
        """The whitening factors :math:`W_j`, ``[K, D, D]``, lower triangular, positive diagonal."""
        return whitening_factor(self.raw_factors)

    def log_det(self) -> Tensor:
        r""":math:`\log|\det W_j| = \sum_i \log W_{j,ii}`, shape ``[K]``."""
        return torch.diagonal(self.raw_factors, dim1=-2, dim2=-1).sum(dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        return full_mahalanobis(x, self.means, self.factors())


class AffineDistance(nn.Module):
    """``|Wx + b|`` (or its ReLU) with ``n_components`` output units."""

    def __init__(self, in_features: int, n_components: int, relu: bool = False) -> None:
        super().__init__()
        _check_size("in_features", in_features)
        _check_size("n_components", n_components)
        linear = nn.Linear(in_features, n_components)
        self.weight = linear.weight
        self.bias = linear.bias
        self.relu = relu

    def forward(self, x: Tensor) -> Tensor:
        return affine_distance(x, self.weight, self.bias, self.relu)


class DotProductEnergy(nn.Module):
    r"""Scaled dot-product energy :math:`-q^\top k/\sqrt{E}` of queries against keys."""

    def __init__(self, scale: float | None = None) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return dot_product_energy(q, k, self.scale)

r"""Distance layers: `x[..., D] -> d[..., K]`, each a pure function plus a thin `nn.Module`.

A distance layer turns an input into one energy per component; an objective from
[implicit_em.objectives][] turns the energies into a loss, and
[implicit_em.responsibilities][] into responsibilities.

| layer                 | $d_j(x)$                                              | volume $\log\lvert\det W_j\rvert$ |
| --------------------- | ----------------------------------------------------- | --------------------------------- |
| `SquaredEuclidean`    | $\lVert x - \mu_j\rVert^2$                            | --                                |
| `DiagonalMahalanobis` | $\tfrac12\lVert e^{s_j}\odot(x-\mu_j)\rVert^2$        | $\sum_i s_{ji}$                   |
| `FullMahalanobis`     | $\tfrac12\lVert W_j(x-\mu_j)\rVert^2$                 | $\sum_i\log W_{j,ii}$             |
| `AffineDistance`      | $\lvert w_j^\top x + b_j\rvert$ (or its ReLU)         | --                                |
| `DotProductEnergy`    | $-q^\top k_j/\sqrt{E}$ (may be negative)              | --                                |

For the Mahalanobis layers $W_j$ is a whitening factor ($\Sigma_j^{-1} = W_j^\top W_j$,
lower triangular with a positive diagonal) and `log_det()` returns $\log\lvert\det W_j\rvert$,
so that $\exp(-d_j + \log\lvert\det W_j\rvert)$ is the Gaussian density up to
$(2\pi)^{-D/2}$; pass it as `log_det` to [mixture_nll][implicit_em.objectives.mixture_nll].

Examples
--------
>>> import torch
>>> from implicit_em import distances, objectives
>>> layer = distances.FullMahalanobis(in_features=2, n_components=3)
>>> d = layer(torch.randn(8, 2))
>>> d.shape
torch.Size([8, 3])
>>> loss = objectives.mixture_nll(d, log_det=layer.log_det())
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
    r"""Squared Euclidean distance $d_j = \lVert x - \mu_j\rVert^2$ to each prototype.

    Computed from differences (no $\lVert x\rVert^2 - 2x^\top\mu + \lVert\mu\rVert^2$
    cancellation), so it is exact and never negative.

    Parameters
    ----------
    x : Tensor
        Inputs, `[..., D]`.
    prototypes : Tensor
        The prototypes $\mu_j$, `[K, D]`.

    Returns
    -------
    Tensor
        Distances `[..., K]`.

    Raises
    ------
    TypeError
        If `x` is not a floating tensor.
    ValueError
        If `x`'s last axis is not `D`.

    Notes
    -----
    Gradient: $\partial d_j/\partial\mu_j = -2(x-\mu_j)$.
    """
    _check_input(x, prototypes.shape[-1])
    diff = x.unsqueeze(-2) - prototypes
    return (diff * diff).sum(dim=-1)


def diagonal_mahalanobis(x: Tensor, means: Tensor, log_scales: Tensor) -> Tensor:
    r"""Diagonal Mahalanobis distance $d_j = \tfrac12\sum_i e^{2 s_{ji}}(x_i-\mu_{ji})^2$.

    The whitening factor is $W_j = \operatorname{diag}(e^{s_j})$, so
    $\log|\det W_j| = \sum_i s_{ji}$.

    Parameters
    ----------
    x : Tensor
        Inputs, `[..., D]`.
    means : Tensor
        The means $\mu_j$, `[K, D]`.
    log_scales : Tensor
        The log-scales $s_j$, `[K, D]`.

    Returns
    -------
    Tensor
        Distances `[..., K]`.

    Raises
    ------
    TypeError
        If `x` is not a floating tensor.
    ValueError
        If `x`'s last axis is not `D`.
    """
    _check_input(x, means.shape[-1])
    z = (x.unsqueeze(-2) - means) * torch.exp(log_scales)
    return 0.5 * (z * z).sum(dim=-1)


def whitening_factor(raw: Tensor) -> Tensor:
    r"""Lower-triangular whitening factor with a positive diagonal, from an unconstrained matrix.

    Parameters
    ----------
    raw : Tensor
        Unconstrained `[..., D, D]`; its strict upper triangle is ignored.

    Returns
    -------
    Tensor
        $W$ of `raw`'s shape: the strict lower triangle of `raw` plus the diagonal
        $e^{\operatorname{diag}(\mathrm{raw})}$.
    """
    lower = torch.tril(raw, diagonal=-1)
    return lower + torch.diag_embed(torch.exp(torch.diagonal(raw, dim1=-2, dim2=-1)))


def full_mahalanobis(x: Tensor, means: Tensor, factors: Tensor) -> Tensor:
    r"""Full Mahalanobis distance $d_j = \tfrac12\lVert W_j(x-\mu_j)\rVert^2$.

    Parameters
    ----------
    x : Tensor
        Inputs, `[..., D]`.
    means : Tensor
        The means $\mu_j$, `[K, D]`.
    factors : Tensor
        The whitening factors $W_j$, `[K, D, D]` (see [whitening_factor][]).

    Returns
    -------
    Tensor
        Distances `[..., K]`.

    Raises
    ------
    TypeError
        If `x` is not a floating tensor.
    ValueError
        If `x`'s last axis is not `D`.

    Notes
    -----
    Gradient: $\partial d_j/\partial W_j = z_j (x-\mu_j)^\top$ with $z_j = W_j(x-\mu_j)$.
    """
    _check_input(x, means.shape[-1])
    diff = x.unsqueeze(-2) - means  # [..., K, D]
    z = torch.einsum("kde,...ke->...kd", factors, diff)
    return 0.5 * (z * z).sum(dim=-1)


def affine_distance(x: Tensor, weight: Tensor, bias: Tensor, relu: bool = False) -> Tensor:
    r"""Affine distance $d_j = |w_j^\top x + b_j|$, or $\max(0, w_j^\top x + b_j)$ with `relu`.

    The reading "neural outputs are distances" (m3): a linear unit measures a signed distance to
    its hyperplane; the absolute value (or ReLU) makes it a distance $\ge 0$.

    Parameters
    ----------
    x : Tensor
        Inputs, `[..., D]`.
    weight : Tensor
        The rows $w_j$, `[K, D]`.
    bias : Tensor
        The offsets $b_j$, `[K]`.
    relu : bool, default=False
        Use $\max(0, \cdot)$ instead of the absolute value.

    Returns
    -------
    Tensor
        Distances `[..., K]`.

    Raises
    ------
    TypeError
        If `x` is not a floating tensor.
    ValueError
        If `x`'s last axis is not `D`.
    """
    _check_input(x, weight.shape[-1])
    y = torch.nn.functional.linear(x, weight, bias)
    return torch.relu(y) if relu else torch.abs(y)


def dot_product_energy(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    r"""Dot-product energy $d_{ij} = -q_i^\top k_j \cdot \mathrm{scale}$ of queries against keys.

    The attention score as an energy, so that `responsibilities(d)` is the attention weight.
    Unlike the other layers this energy can be negative; only differences matter to softmax.

    Parameters
    ----------
    q : Tensor
        Queries, `[..., Lq, E]`.
    k : Tensor
        Keys, `[..., Lk, E]`.
    scale : float or None, default=None
        The score scale; $1/\sqrt{E}$ when None.

    Returns
    -------
    Tensor
        Energies `[..., Lq, Lk]`.

    Raises
    ------
    TypeError
        If `q` is not a floating tensor.
    ValueError
        If `q` and `k` differ in their last axis.
    """
    _check_input(q, k.shape[-1], "q")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return -(q @ k.transpose(-2, -1)) * scale


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------


class SquaredEuclidean(nn.Module):
    r"""Squared Euclidean distance to `n_components` learned prototypes.

    The module form of [squared_euclidean][]: `forward(x)` maps `x[..., D]` to `d[..., K]`.

    Parameters
    ----------
    in_features : int
        $D$.
    n_components : int
        $K$.

    Attributes
    ----------
    prototypes : nn.Parameter
        The prototypes $\mu_j$, `[K, D]`, initialized from a standard normal.

    Raises
    ------
    ValueError
        If `in_features` or `n_components` is not a positive integer.
    """

    def __init__(self, in_features: int, n_components: int) -> None:
        super().__init__()
        _check_size("in_features", in_features)
        _check_size("n_components", n_components)
        self.prototypes = nn.Parameter(torch.randn(n_components, in_features))

    def forward(self, x: Tensor) -> Tensor:
        return squared_euclidean(x, self.prototypes)


class DiagonalMahalanobis(nn.Module):
    r"""Diagonal Mahalanobis distance with per-component log-scales, $W_j = \operatorname{diag}(e^{s_j})$.

    The module form of [diagonal_mahalanobis][]: `forward(x)` maps `x[..., D]` to `d[..., K]`.

    Parameters
    ----------
    in_features : int
        $D$.
    n_components : int
        $K$.

    Attributes
    ----------
    means : nn.Parameter
        The means $\mu_j$, `[K, D]`, initialized from a standard normal.
    log_scales : nn.Parameter
        The log-scales $s_j$, `[K, D]`, initialized to zero (unit scales).

    Raises
    ------
    ValueError
        If `in_features` or `n_components` is not a positive integer.
    """

    def __init__(self, in_features: int, n_components: int) -> None:
        super().__init__()
        _check_size("in_features", in_features)
        _check_size("n_components", n_components)
        self.means = nn.Parameter(torch.randn(n_components, in_features))
        self.log_scales = nn.Parameter(torch.zeros(n_components, in_features))

    def log_det(self) -> Tensor:
        r"""The volume term $\log|\det W_j| = \sum_i s_{ji}$, shape `[K]`."""
        return self.log_scales.sum(dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        return diagonal_mahalanobis(x, self.means, self.log_scales)


class FullMahalanobis(nn.Module):
    r"""Full Mahalanobis distance with a lower-triangular whitening factor per component.

    The module form of [full_mahalanobis][]: `forward(x)` maps `x[..., D]` to `d[..., K]`.

    Parameters
    ----------
    in_features : int
        $D$.
    n_components : int
        $K$.

    Attributes
    ----------
    means : nn.Parameter
        The means $\mu_j$, `[K, D]`, initialized from a standard normal.
    raw_factors : nn.Parameter
        Unconstrained `[K, D, D]`, initialized to zero (identity factors); [factors][] maps
        them to the whitening factors.

    Raises
    ------
    ValueError
        If `in_features` or `n_components` is not a positive integer.
    """

    def __init__(self, in_features: int, n_components: int) -> None:
        super().__init__()
        _check_size("in_features", in_features)
        _check_size("n_components", n_components)
        self.means = nn.Parameter(torch.randn(n_components, in_features))
        self.raw_factors = nn.Parameter(torch.zeros(n_components, in_features, in_features))

    def factors(self) -> Tensor:
        """The whitening factors $W_j$, `[K, D, D]`, lower triangular with a positive diagonal."""
        return whitening_factor(self.raw_factors)

    def log_det(self) -> Tensor:
        r"""The volume term $\log|\det W_j| = \sum_i \log W_{j,ii}$, shape `[K]`."""
        return torch.diagonal(self.raw_factors, dim1=-2, dim2=-1).sum(dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        return full_mahalanobis(x, self.means, self.factors())


class AffineDistance(nn.Module):
    r"""Affine distance $|Wx + b|$ (or its ReLU) with `n_components` output units.

    The module form of [affine_distance][]: `forward(x)` maps `x[..., D]` to `d[..., K]`.

    Parameters
    ----------
    in_features : int
        $D$.
    n_components : int
        $K$.
    relu : bool, default=False
        Use $\max(0, \cdot)$ instead of the absolute value.

    Attributes
    ----------
    weight : nn.Parameter
        `[K, D]`, initialized as `nn.Linear` initializes its weight.
    bias : nn.Parameter
        `[K]`, initialized as `nn.Linear` initializes its bias.

    Raises
    ------
    ValueError
        If `in_features` or `n_components` is not a positive integer.
    """

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
    r"""Scaled dot-product energy $-q^\top k/\sqrt{E}$ of queries against keys.

    The module form of [dot_product_energy][]: `forward(q, k)` maps `q[..., Lq, E]` and
    `k[..., Lk, E]` to `d[..., Lq, Lk]`.

    Parameters
    ----------
    scale : float or None, default=None
        The score scale; $1/\sqrt{E}$ when None.
    """

    def __init__(self, scale: float | None = None) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return dot_product_energy(q, k, self.scale)

r"""Per-covariance-type Gaussian math, as small functions selected by name.

Shapes, with `K` components and `D` features (scikit-learn's conventions):

| type        | covariance         | precision Cholesky factor $U$ ($\Sigma^{-1}=UU^\top$) |
| ----------- | ------------------ | ----------------------------------------------------- |
| `full`      | `[K, D, D]`        | `[K, D, D]` upper triangular                          |
| `tied`      | `[D, D]`           | `[D, D]` upper triangular                             |
| `diag`      | `[K, D]` variances | `[K, D]` $= 1/\sigma_{jd}$                            |
| `spherical` | `[K]` variances    | `[K]` $= 1/\sigma_j$                                  |

A component's energy is $d_j(x) = \tfrac12\lVert (x-\mu_j)^\top U_j\rVert^2$ and its volume
$\log|\det U_j|$, so $\log\mathcal N(x\mid\mu_j,\Sigma_j) = -\tfrac D2\log 2\pi - d_j
+ \log|\det U_j|$: exactly the `d` and `log_det` of `implicit_em.objectives.mixture_nll`.

Every type provides three families of functions, gathered in a `CovarianceModel`:

* **EM** (closed form): `energies` of shifted data $y = x - s$ (batched matmuls, never a
  Python loop over K), which also return the chunk's *features*, `moments` (the chunk's sums,
  built from those features, so the M-step reuses the E-step's work), and `estimate`, the
  M-step from the summed statistics. `full` accumulates its scatter about the current means
  from the E-step's whitened residuals $z_{tj} = U_j^\top(x_t-\mu_j)$:
  $\sum_t r_{tj}(x_t-\mu_j)(x_t-\mu_j)^\top = U_j^{-\top}\big(\sum_t r_{tj}z_{tj}z_{tj}^\top\big)U_j^{-1}$
  (differences first: no cancellation; one batched matmul; `unwhiten` applies the K small
  triangular factors once per pass). `diag` and `spherical` read both moments off one
  matmul $r^\top[y^2, y]$ of the features their energies were computed from; `tied`
  and they accumulate about the shared shift $s$ (the mixture mean), which removes the
  data's offset (constant features give exactly zero variance). Either way the statistics are
  plain sums, so chunks and ranks add, and the variances are clipped at zero before
  `reg_covar` is added: never negative, in float32 too.
* **Natural parameters** (`preconditioned`): `natural_energies` is differentiable in the
  covariance itself, and `mean_step` / `covariance_step` apply Xu & Jordan's preconditioners
  $P_{\mu_j} = \Sigma_j/N_j$ and $P_{\Sigma_j} = \tfrac2{N_j}\Sigma_j\otimes\Sigma_j$.
* **Unconstrained parameters** (`gd`, `adam`): a raw tensor mapped to the whitening factor
  $W_j = U_j^\top$ (lower triangular, positive diagonal), with energies from
  `implicit_em.distances`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from implicit_em.distances import diagonal_mahalanobis, full_mahalanobis, whitening_factor
from implicit_em.mixture.workspace import Workspace

__all__ = ["COVARIANCE_TYPES", "ILL_DEFINED_COVARIANCE", "CovarianceModel", "covariance_model"]

ILL_DEFINED_COVARIANCE = (
    "Fitting the mixture model failed because some components have ill-defined empirical "
    "covariance (for instance caused by singleton or collapsed samples). Try to decrease the "
    "number of components, increase reg_covar, or scale the input data."
)
"""The error of a covariance that is not positive-definite (scikit-learn's wording)."""


def _eye(d: int, like: Tensor) -> Tensor:
    return torch.eye(d, dtype=like.dtype, device=like.device)


def _sym(a: Tensor) -> Tensor:
    return 0.5 * (a + a.mT)


def _precision_cholesky_matrix(cov: Tensor) -> Tensor:
    """Upper $U = L^{-\\top}$ for $\\Sigma = LL^\\top$, batched over leading axes."""
    lower, info = torch.linalg.cholesky_ex(cov)
    if bool((info != 0).any()):
        raise ValueError(ILL_DEFINED_COVARIANCE)
    eye = _eye(cov.shape[-1], cov).expand_as(cov)
    return torch.linalg.solve_triangular(lower, eye, upper=False).mT


def _outer_precision(prec_chol: Tensor) -> Tensor:
    return prec_chol @ prec_chol.mT


def _square_precision(prec_chol: Tensor) -> Tensor:
    return prec_chol * prec_chol


def _log_raw(prec_chol: Tensor) -> Tensor:
    return torch.log(prec_chol)


def _check_positive(var: Tensor) -> None:
    if not bool((var > 0).all()):
        raise ValueError(ILL_DEFINED_COVARIANCE)


def _square_features(y: Tensor, workspace: Workspace | None = None) -> Tensor:
    """$[y^2, y]$, `[B, 2D]`: what the diagonal energies and moments are linear in."""
    shape = (y.shape[0], 2 * y.shape[1])
    features = y.new_empty(shape) if workspace is None else workspace.take("features", shape, y)
    torch.mul(y, y, out=features[:, : y.shape[1]])
    features[:, y.shape[1] :] = y
    return features


def _quadratic_operands(m: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    r"""The per-pass operands of `_quadratic`: $\tfrac12\sum_d s\,m^2$ `[K]` and
    $[\tfrac12 s, -s\odot m]^\top$ `[2D, K]`."""
    weights = torch.cat([0.5 * scale, -(m * scale)], dim=1)
    return 0.5 * (m * m * scale).sum(dim=1), weights.T


def _quadratic(
    y: Tensor, operands: tuple[Tensor, ...], workspace: Workspace
) -> tuple[Tensor, Tensor]:
    r"""$\tfrac12\sum_d s_{jd}(y_d - m_{jd})^2$, `[B, K]`, clipped at 0, and $[y^2, y]$.

    One matmul: $[y^2, y]\,[\tfrac12 s, -s\odot m]^\top + \tfrac12\sum_d s\,m^2$
    (`operands` from `_quadratic_operands`), written into `workspace`. The features
    $[y^2, y]$ are returned for the moments of the same chunk (`_square_moments`), so the
    M-step reuses them.
    """
    offset, weights = operands
    features = _square_features(y, workspace)
    energies = workspace.take("energies", (y.shape[0], weights.shape[1]), y)
    return torch.addmm(offset, features, weights, out=energies).clamp_min_(0.0), features


def _square_moments(
    y: Tensor, features: Tensor, r: Tensor, workspace: Workspace
) -> tuple[Tensor, Tensor]:
    r"""$F_j = \sum_t r_{tj}y_t$ and $\sum_t r_{tj}y_t^2$ from one matmul
    $r^\top[y^2, y]$, `([K, D], [K, D])`."""
    moments = r.T @ features
    dim = y.shape[1]
    return moments[:, dim:], moments[:, :dim]


def _square_features_about(y: Tensor, ref: Tensor) -> Tensor:
    return _square_features(y)


def _residual_width(k: int, d: int) -> int:
    return k * d


def _data_width(k: int, d: int) -> int:
    return d


def _square_width(k: int, d: int) -> int:
    return 2 * d


def _identity_whitening(second: Tensor, prec_chol: Tensor | None) -> Tensor:
    return second


# ---------------------------------------------------------------------------------------------
# full
# ---------------------------------------------------------------------------------------------


def _full_parameters(k: int, d: int) -> int:
    return k * d * (d + 1) // 2


def _full_log_det(prec_chol: Tensor, k: int, d: int) -> Tensor:
    return torch.log(torch.diagonal(prec_chol, dim1=-2, dim2=-1)).sum(dim=-1)


_FEATURES_LAST_FROM = 16
"""The least `D` for which the `full` E-step writes its residuals features last
(`_full_energies`)."""


def _full_operands(m: Tensor, prec_chol: Tensor) -> tuple[Tensor, ...]:
    r"""The per-pass operands of `_full_energies` for shifted means `m`.

    For $D \ge 16$, the augmented factors $\big[\begin{smallmatrix}U_j \\ -m_j^\top U_j
    \end{smallmatrix}\big]$, `[K, D+1, D]`; below, the stacked factors
    $[U_1 \cdots U_K]^\top$ `[K·D, D]` and $[U_1^\top m_1 \cdots U_K^\top m_K]$ `[K·D, 1]`.
    """
    k, d = m.shape
    shifted = m.unsqueeze(1) @ prec_chol
    if d >= _FEATURES_LAST_FROM:
        return (torch.cat([prec_chol, -shifted], dim=1),)
    return prec_chol.mT.reshape(k * d, d), shifted.mT.reshape(k * d, 1)


def _full_energies(
    y: Tensor, operands: tuple[Tensor, ...], workspace: Workspace
) -> tuple[Tensor, Tensor]:
    r"""$d_j = \tfrac12\lVert z_j\rVert^2$ and the whitened residuals
    $z_j = U_j^\top(y-m_j)$, `([B, K], [K, D, B])`, from one matmul.

    The residuals are written into `workspace` in one of two layouts, chosen by $D$
    (`operands` from `_full_operands`):

    * $D \ge 16$, features last: $z_j^\top = [y, 1]\big[\begin{smallmatrix}U_j \\
      -m_j^\top U_j\end{smallmatrix}\big]$, one batched `[B, D+1] @ [D+1, D]` product into
      `[K, B, D]` storage, returned as its transposed `[K, D, B]` view. Each component's
      block is contiguous, which keeps the product's writes and the M-step's batched matmul
      (`_full_moments`) fast: a float32 pass over (200k, 32, 16) took 0.15-0.20 s, against
      0.21-0.31 s for the rows-last layout, on a 2-core EPYC (AVX2).
    * $D < 16$, rows last: $z = [U_1 \cdots U_K]^\top y^\top - [U_1^\top m_1 \cdots
      U_K^\top m_K]$, one `[K·D, D] @ [D, B]` product into `[K, D, B]`: a few features are
      too narrow a last axis for the vector units (2-3 times faster than features last at
      $D \le 8$ on the same machine).

    Either way `d` is a transposed view of `_half_squared_norms`.
    """
    b, d = y.shape
    if d >= _FEATURES_LAST_FROM:
        (factors,) = operands
        k = factors.shape[0]
        augmented = workspace.take("augmented", (b, d + 1), y)
        augmented[:, :d] = y
        augmented[:, d] = 1.0
        z = workspace.take("residuals", (k, b, d), y)
        z = torch.bmm(augmented.expand(k, b, d + 1), factors, out=z).mT
    else:
        stacked, offset = operands
        k = stacked.shape[0] // d
        z = workspace.take("residuals", (k * d, b), y)
        z = torch.addmm(offset, stacked, y.T, beta=-1, out=z).view(k, d, b)
    return _half_squared_norms(z, workspace).T, z


def _half_squared_norms(z: Tensor, workspace: Workspace) -> Tensor:
    r"""$\tfrac12\lVert z_{tj}\rVert^2$ of residuals `z[K, D, B]`, `[K, B]`, written into
    `workspace`.

    Features last (`z` a transposed view), one `vector_norm` over the contiguous axis reads
    `z` once; rows last, where that reduction runs across strides and is many times slower,
    the squares go to a workspace buffer first. Either way no tensor is allocated per chunk
    (`torch.linalg.vecdot` allocates a `[K, D, B]` array of squares, whose page faults cost
    about 45 ms of system time per float32 pass over (200k, 32, 16) on a 2-core EPYC).
    """
    k, _, b = z.shape
    norms = workspace.take("energies", (k, b), z)
    if z.mT.is_contiguous():
        torch.linalg.vector_norm(z, dim=1, out=norms).square_()
    else:
        squares = torch.mul(z, z, out=workspace.take("squares", z.shape, z))
        torch.sum(squares, dim=1, out=norms)
    return norms.mul_(0.5)


def _full_features(y: Tensor, ref: Tensor) -> Tensor:
    r"""Residuals $y - \mathrm{ref}_j$ with no whitening ($U = I$), `[K, D, B]`."""
    return y.T.unsqueeze(0) - ref.unsqueeze(-1)


def _full_moments(y: Tensor, z: Tensor, r: Tensor, workspace: Workspace) -> tuple[Tensor, Tensor]:
    r"""$F_j = \sum_t r_{tj}y_t$ and the whitened scatter
    $G_j = \sum_t r_{tj}\,z_{tj}z_{tj}^\top$, `([K, D], [K, D, D])`.

    $G_j$ is one batched matmul of $\sqrt{r_{tj}}\,z_{tj}$ with itself; the
    residuals are differences taken before squaring, so there is no cancellation. `z` is
    weighted in place (it is the chunk's scratch).
    """
    scale = torch.sqrt(r.T, out=workspace.take("scale", (r.shape[1], r.shape[0]), r))
    weighted = z.mul_(scale.unsqueeze(1))
    return r.T @ y, weighted @ weighted.mT


def _full_unwhiten(second: Tensor, prec_chol: Tensor | None) -> Tensor:
    r"""The scatter in data coordinates, $S_j = U_j^{-\top} G_j U_j^{-1}$ (`U` of the
    E-step that whitened the residuals; `None` for none)."""
    if prec_chol is None:
        return second
    inverse = torch.linalg.solve_triangular(
        prec_chol, _eye(prec_chol.shape[-1], prec_chol).expand_as(prec_chol), upper=True
    )
    return inverse.mT @ second @ inverse


def _full_estimate(second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float) -> Tensor:
    cov = second / n[:, None, None] - delta.unsqueeze(-1) * delta.unsqueeze(-2)
    return _sym(cov) + reg * _eye(cov.shape[-1], cov)


def _full_noise(cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
    return (torch.linalg.cholesky(cov)[labels] @ z.unsqueeze(-1)).squeeze(-1)


def _full_natural(x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
    lower = torch.linalg.cholesky(cov)
    diff = (x.unsqueeze(0) - means.unsqueeze(1)).mT
    z = torch.linalg.solve_triangular(lower, diff, upper=False)
    log_det = -torch.log(torch.diagonal(lower, dim1=-2, dim2=-1)).sum(dim=-1)
    return 0.5 * (z * z).sum(dim=1).T, log_det


def _full_mean_step(cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
    return (cov @ grad.unsqueeze(-1)).squeeze(-1) / n[:, None]


def _full_covariance_step(
    cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
) -> Tensor:
    step = 2.0 * cov @ _sym(grad) @ cov / n[:, None, None]
    cov = _sym(cov + step - delta.unsqueeze(-1) * delta.unsqueeze(-2))
    return cov + reg * _eye(cov.shape[-1], cov)


def _full_raw(prec_chol: Tensor) -> Tensor:
    w = prec_chol.mT
    return torch.tril(w, -1) + torch.diag_embed(torch.log(torch.diagonal(w, dim1=-2, dim2=-1)))


def _full_raw_energies(x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
    return full_mahalanobis(x, means, whitening_factor(raw)), torch.diagonal(
        raw, dim1=-2, dim2=-1
    ).sum(dim=-1)


def _full_raw_prec_chol(raw: Tensor) -> Tensor:
    return whitening_factor(raw).mT


# ---------------------------------------------------------------------------------------------
# tied: one full covariance shared by every component
# ---------------------------------------------------------------------------------------------


def _tied_parameters(k: int, d: int) -> int:
    return d * (d + 1) // 2


def _tied_log_det(prec_chol: Tensor, k: int, d: int) -> Tensor:
    return torch.log(torch.diagonal(prec_chol)).sum().expand(k)


def _tied_operands(m: Tensor, prec_chol: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""The per-pass operands of `_tied_energies`: $U$, $-(m_jU)^\top$ `[D, K]` and
    $\tfrac12\lVert m_jU\rVert^2$ `[K]`."""
    mu = m @ prec_chol
    return prec_chol, -mu.T, 0.5 * (mu * mu).sum(dim=1)


def _tied_energies(
    y: Tensor, operands: tuple[Tensor, ...], workspace: Workspace
) -> tuple[Tensor, Tensor]:
    r"""$d_j = \tfrac12\lVert yU\rVert^2 - (m_jU)\cdot(yU) + \tfrac12\lVert m_jU\rVert^2$,
    `[B, K]`, clipped at 0, and `y` (the features of `_tied_moments`), with every
    intermediate written into `workspace` (`operands` from `_tied_operands`).
    """
    prec_chol, minus_mu, half_mu_sq = operands
    (b, d), k = y.shape, minus_mu.shape[1]
    whitened = torch.mm(y, prec_chol, out=workspace.take("whitened", (b, d), y))
    energies = workspace.take("energies", (b, k), y)
    torch.addmm(half_mu_sq, whitened, minus_mu, out=energies)
    squares = torch.mul(whitened, whitened, out=workspace.take("squares", (b, d), y))
    energies.add_(squares.sum(dim=1, keepdim=True), alpha=0.5)
    return energies.clamp_min_(0.0), y


def _tied_features(y: Tensor, ref: Tensor) -> Tensor:
    return y


def _tied_moments(
    y: Tensor, features: Tensor, r: Tensor, workspace: Workspace
) -> tuple[Tensor, Tensor]:
    r"""$F_j$ and $\sum_t (y_t - s)(y_t - s)^\top$ (rows of `r` sum to 1)."""
    return r.T @ y, y.T @ y


def _tied_estimate(second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float) -> Tensor:
    between = (delta * n[:, None]).T @ delta
    cov = (second - between) / n_total
    return _sym(cov) + reg * _eye(cov.shape[-1], cov)


def _tied_natural(x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
    lower = torch.linalg.cholesky(cov)
    diff = (x.unsqueeze(0) - means.unsqueeze(1)).mT
    z = torch.linalg.solve_triangular(lower, diff, upper=False)
    log_det = -torch.log(torch.diagonal(lower)).sum().expand(means.shape[0])
    return 0.5 * (z * z).sum(dim=1).T, log_det


def _tied_noise(cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
    return z @ torch.linalg.cholesky(cov).T


def _tied_mean_step(cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
    return grad @ cov / n[:, None]


def _tied_covariance_step(
    cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
) -> Tensor:
    step = 2.0 * cov @ _sym(grad) @ cov / n_total
    shift = (delta * n[:, None]).T @ delta / n_total
    cov = _sym(cov + step - shift)
    return cov + reg * _eye(cov.shape[-1], cov)


def _tied_raw_energies(x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
    k = means.shape[0]
    w = whitening_factor(raw).expand(k, -1, -1)
    return full_mahalanobis(x, means, w), torch.diagonal(raw).sum().expand(k)


def _tied_raw_prec_chol(raw: Tensor) -> Tensor:
    return whitening_factor(raw).T


# ---------------------------------------------------------------------------------------------
# diag
# ---------------------------------------------------------------------------------------------


def _diag_parameters(k: int, d: int) -> int:
    return k * d


def _diag_precision_cholesky(cov: Tensor) -> Tensor:
    _check_positive(cov)
    return torch.rsqrt(cov)


def _diag_log_det(prec_chol: Tensor, k: int, d: int) -> Tensor:
    return torch.log(prec_chol).sum(dim=1)


def _diag_operands(m: Tensor, prec_chol: Tensor) -> tuple[Tensor, Tensor]:
    return _quadratic_operands(m, prec_chol * prec_chol)


def _diag_estimate(second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float) -> Tensor:
    return (second / n[:, None] - delta * delta).clamp_min(0.0) + reg


def _diag_noise(cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
    return torch.sqrt(cov)[labels] * z


def _diag_natural(x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
    diff = x.unsqueeze(1) - means
    d = 0.5 * (diff * diff / cov).sum(dim=-1)
    return d, -0.5 * torch.log(cov).sum(dim=1)


def _diag_mean_step(cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
    return cov * grad / n[:, None]


def _diag_covariance_step(
    cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
) -> Tensor:
    return (cov + 2.0 * cov * cov * grad / n[:, None] - delta * delta).clamp_min(0.0) + reg


def _diag_raw_energies(x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
    return diagonal_mahalanobis(x, means, raw), raw.sum(dim=1)


# ---------------------------------------------------------------------------------------------
# spherical: one variance per component
# ---------------------------------------------------------------------------------------------


def _spherical_parameters(k: int, d: int) -> int:
    return k


def _spherical_log_det(prec_chol: Tensor, k: int, d: int) -> Tensor:
    return d * torch.log(prec_chol)


def _spherical_operands(m: Tensor, prec_chol: Tensor) -> tuple[Tensor, Tensor]:
    return _quadratic_operands(m, (prec_chol * prec_chol).unsqueeze(1).expand_as(m))


def _spherical_moments(
    y: Tensor, features: Tensor, r: Tensor, workspace: Workspace
) -> tuple[Tensor, Tensor]:
    first, second = _square_moments(y, features, r, workspace)
    return first, second.sum(dim=1)


def _spherical_estimate(
    second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
) -> Tensor:
    var = (second / n - (delta * delta).sum(dim=1)) / delta.shape[1]
    return var.clamp_min(0.0) + reg


def _spherical_noise(cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
    return torch.sqrt(cov)[labels, None] * z


def _spherical_natural(x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
    diff = x.unsqueeze(1) - means
    d = 0.5 * (diff * diff).sum(dim=-1) / cov
    return d, -0.5 * means.shape[1] * torch.log(cov)


def _spherical_mean_step(cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
    return cov[:, None] * grad / n[:, None]


def _spherical_covariance_step(
    cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
) -> Tensor:
    dim = delta.shape[1]
    var = cov + 2.0 * cov * cov * grad / (dim * n) - (delta * delta).sum(dim=1) / dim
    return var.clamp_min(0.0) + reg


def _spherical_raw_energies(x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
    scales = raw.unsqueeze(1).expand_as(means)
    return diagonal_mahalanobis(x, means, scales), raw * means.shape[1]


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CovarianceModel:
    r"""The functions of one covariance type (see the module docstring for their roles).

    Attributes
    ----------
    name : str
        `"full"`, `"tied"`, `"diag"` or `"spherical"`.
    centered : bool
        Whether `second` is taken about the current means (else about the shift).
    per_component : bool
        Whether the covariance has a leading component axis (all but tied).
    precision : Callable
        $U$ -> $\Sigma^{-1} = UU^\top$.
    n_parameters : Callable
        `(K, D) -> int`, free covariance parameters (for BIC/AIC).
    precision_cholesky : Callable
        Covariance -> $U$ (`ValueError` if not positive definite).
    from_precision : Callable
        Precision -> covariance.
    log_det : Callable
        `(U, K, D) -> [K]`, $\log|\det U_j|$.
    operands : Callable
        `(m, U) -> operands`, what the energies of every chunk of a pass share, for shifted
        means `m` (stacked whitening factors, quadratic-form weights).
    energies : Callable
        `(y, operands, workspace) -> (d [B, K], features)`, $d_j$ for shifted data `y`, and
        the chunk's features the moments are built from (whitened residuals for `full`,
        $[y^2, y]$ for `diag`/`spherical`, `y` for tied), written into the `Workspace`.
    features : Callable
        `(y, ref) -> features`, the same features without an E-step (no whitening; used for
        the initial M-step).
    moments : Callable
        `(y, features, r, workspace) -> (first, second)`, the chunk's sums $F_j$ and second
        moment (`full`: in the whitened coordinates of its features, which it overwrites).
    unwhiten : Callable
        `(second, U or None) -> second`, the summed second moment in data coordinates
        (`full`: $U_j^{-\top}G_jU_j^{-1}$; the identity otherwise).
    row_width : Callable
        `(K, D) -> int`, the features' numbers per row (sizes default chunks).
    estimate : Callable
        `(second, N_j, delta, N, reg) -> covariance`, the M-step, with `delta` the new means
        minus the reference of `second`.
    noise : Callable
        `(covariance, labels, z) -> [n, D]`, $L_j z$ with $L_jL_j^\top=\Sigma_j$.
    natural_energies : Callable
        `(x, means, covariance) -> (d, log_det)`, differentiable in all three.
    mean_step : Callable
        `(covariance, grad, N_j) -> step`, $(\Sigma_j/N_j)\,g_{\mu_j}$.
    covariance_step : Callable
        `(covariance, grad, N_j, delta, N, reg) -> covariance`, the preconditioned step
        $\Sigma + \tfrac2{N_j}\Sigma g\Sigma$ moved to the new means ($-\delta\delta^\top$,
        the parallel-axis shift), plus `reg`.
    raw : Callable
        $U$ -> unconstrained tensor (log of the positive diagonal).
    raw_energies : Callable
        `(x, means, raw) -> (d, log_det)`, differentiable in all three.
    raw_precision_cholesky : Callable
        Unconstrained tensor -> $U$.
    """

    name: str
    centered: bool
    per_component: bool
    precision: Callable[[Tensor], Tensor]
    n_parameters: Callable[[int, int], int]
    precision_cholesky: Callable[[Tensor], Tensor]
    from_precision: Callable[[Tensor], Tensor]
    log_det: Callable[[Tensor, int, int], Tensor]
    operands: Callable[[Tensor, Tensor], tuple[Tensor, ...]]
    energies: Callable[[Tensor, tuple[Tensor, ...], Workspace], tuple[Tensor, Tensor]]
    features: Callable[[Tensor, Tensor], Tensor]
    moments: Callable[[Tensor, Tensor, Tensor, Workspace], tuple[Tensor, Tensor]]
    unwhiten: Callable[[Tensor, Tensor | None], Tensor]
    row_width: Callable[[int, int], int]
    estimate: Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]
    noise: Callable[[Tensor, Tensor, Tensor], Tensor]
    natural_energies: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
    mean_step: Callable[[Tensor, Tensor, Tensor], Tensor]
    covariance_step: Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, float], Tensor]
    raw: Callable[[Tensor], Tensor]
    raw_energies: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
    raw_precision_cholesky: Callable[[Tensor], Tensor]


COVARIANCE_TYPES: dict[str, CovarianceModel] = {
    "full": CovarianceModel(
        name="full",
        centered=True,
        per_component=True,
        precision=_outer_precision,
        n_parameters=_full_parameters,
        precision_cholesky=_precision_cholesky_matrix,
        from_precision=torch.linalg.inv,
        log_det=_full_log_det,
        operands=_full_operands,
        energies=_full_energies,
        features=_full_features,
        moments=_full_moments,
        unwhiten=_full_unwhiten,
        row_width=_residual_width,
        estimate=_full_estimate,
        noise=_full_noise,
        natural_energies=_full_natural,
        mean_step=_full_mean_step,
        covariance_step=_full_covariance_step,
        raw=_full_raw,
        raw_energies=_full_raw_energies,
        raw_precision_cholesky=_full_raw_prec_chol,
    ),
    "tied": CovarianceModel(
        name="tied",
        centered=False,
        per_component=False,
        precision=_outer_precision,
        n_parameters=_tied_parameters,
        precision_cholesky=_precision_cholesky_matrix,
        from_precision=torch.linalg.inv,
        log_det=_tied_log_det,
        operands=_tied_operands,
        energies=_tied_energies,
        features=_tied_features,
        moments=_tied_moments,
        unwhiten=_identity_whitening,
        row_width=_data_width,
        estimate=_tied_estimate,
        noise=_tied_noise,
        natural_energies=_tied_natural,
        mean_step=_tied_mean_step,
        covariance_step=_tied_covariance_step,
        raw=_full_raw,
        raw_energies=_tied_raw_energies,
        raw_precision_cholesky=_tied_raw_prec_chol,
    ),
    "diag": CovarianceModel(
        name="diag",
        centered=False,
        per_component=True,
        precision=_square_precision,
        n_parameters=_diag_parameters,
        precision_cholesky=_diag_precision_cholesky,
        from_precision=torch.reciprocal,
        log_det=_diag_log_det,
        operands=_diag_operands,
        energies=_quadratic,
        features=_square_features_about,
        moments=_square_moments,
        unwhiten=_identity_whitening,
        row_width=_square_width,
        estimate=_diag_estimate,
        noise=_diag_noise,
        natural_energies=_diag_natural,
        mean_step=_diag_mean_step,
        covariance_step=_diag_covariance_step,
        raw=_log_raw,
        raw_energies=_diag_raw_energies,
        raw_precision_cholesky=torch.exp,
    ),
    "spherical": CovarianceModel(
        name="spherical",
        centered=False,
        per_component=True,
        precision=_square_precision,
        n_parameters=_spherical_parameters,
        precision_cholesky=_diag_precision_cholesky,
        from_precision=torch.reciprocal,
        log_det=_spherical_log_det,
        operands=_spherical_operands,
        energies=_quadratic,
        features=_square_features_about,
        moments=_spherical_moments,
        unwhiten=_identity_whitening,
        row_width=_square_width,
        estimate=_spherical_estimate,
        noise=_spherical_noise,
        natural_energies=_spherical_natural,
        mean_step=_spherical_mean_step,
        covariance_step=_spherical_covariance_step,
        raw=_log_raw,
        raw_energies=_spherical_raw_energies,
        raw_precision_cholesky=torch.exp,
    ),
}


def covariance_model(name: str) -> CovarianceModel:
    """The `CovarianceModel` for `name`; `ValueError` for an unknown type."""
    try:
        return COVARIANCE_TYPES[name]
    except KeyError:
        raise ValueError(
            f"covariance_type must be one of {sorted(COVARIANCE_TYPES)}, got {name!r}"
        ) from None

r"""The protocol every covariance type implements, and what the matrix types and the vector
types share.

A type is one `CovarianceModel` subclass in its own module; its methods fall in four groups
(the roles are stated in `implicit_em.mixture.covariance`):

* **parameters**: `second_shape`, `n_parameters`, `precision_cholesky`, `precision`,
  `from_precision`, `log_det`, `noise`;
* **EM**: `row_width`, `row_features`, `data`, `operands`, `logits`, `features`,
  `moments`, `responsibility_moments`, `scatter`, `unwhiten`, `estimate`;
* **natural gradient** (`preconditioned`): `natural_energies`, `mean_step`,
  `covariance_step`;
* **unconstrained** (`gd`, `adam`): `raw`, `raw_energies`, `raw_precision_cholesky`, and
  the steps in each component's units, `offset_in_units`, `zero_log_ratio`, `scaled`,
  `clip_log_ratio`, `regularized` and `unregularized`.

`MatrixCovariance` (`full`, `tied`) and `VectorCovariance` (`diag`, `spherical`) hold
the methods their two types share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from implicit_em.mixture.workspace import Workspace

__all__ = [
    "ILL_DEFINED_COVARIANCE",
    "RESPONSIBILITY_ROWS",
    "CovarianceModel",
    "MatrixCovariance",
    "VectorCovariance",
    "eye",
    "sym",
]

RESPONSIBILITY_ROWS = 4096
"""Rows per chunk of `responsibility_moments` where a type takes them in chunks."""

_KEPT = 1e-3
"""The least fraction of a covariance's eigenvalue that `unregularized` keeps."""

ILL_DEFINED_COVARIANCE = (
    "Fitting the mixture model failed because some components have ill-defined empirical "
    "covariance (for instance caused by singleton or collapsed samples). Try to decrease the "
    "number of components, increase reg_covar, or scale the input data."
)
"""The error of a covariance that is not positive-definite (scikit-learn's wording)."""


def eye(d: int, like: Tensor) -> Tensor:
    """The `[D, D]` identity in `like`'s dtype and device."""
    return torch.eye(d, dtype=like.dtype, device=like.device)


def sym(a: Tensor) -> Tensor:
    r"""$\tfrac12(A + A^\top)$ over the last two axes."""
    return 0.5 * (a + a.mT)


class CovarianceModel(ABC):
    """One covariance type: its parameters, its EM step and its two gradient parameterizations.

    Attributes
    ----------
    name : str
        `"full"`, `"tied"`, `"diag"` or `"spherical"`.
    centered : bool
        Whether the second moment is taken about the current means (else about the shift).
    per_component : bool
        Whether the covariance has a leading component axis (all but tied).
    """

    name: ClassVar[str]
    centered: ClassVar[bool] = False
    per_component: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- parameters ------------------------------------------------------------------------

    @abstractmethod
    def second_shape(self, k: int, d: int) -> tuple[int, ...]:
        """The shape of the covariance (and of the summed second moment)."""

    @abstractmethod
    def n_parameters(self, k: int, d: int) -> int:
        """Free covariance parameters (for BIC/AIC)."""

    @abstractmethod
    def precision_cholesky(self, cov: Tensor) -> Tensor:
        """Covariance -> $U$ (`ValueError` if not positive definite)."""

    @abstractmethod
    def precision(self, prec_chol: Tensor) -> Tensor:
        r"""$U$ -> $\Sigma^{-1} = UU^\top$."""

    @abstractmethod
    def from_precision(self, precision: Tensor) -> Tensor:
        """Precision -> covariance."""

    @abstractmethod
    def log_det(self, prec_chol: Tensor, k: int, d: int) -> Tensor:
        r"""$\log|\det U_j|$, `[K]`."""

    @abstractmethod
    def noise(self, cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
        r"""$L_j z$ with $L_jL_j^\top = \Sigma_j$, `[n, D]`, for standard normal `z`."""

    # -- EM --------------------------------------------------------------------------------

    @abstractmethod
    def row_width(self, k: int, d: int) -> int:
        """The numbers per row of a chunk's features (sizes default chunks)."""

    @abstractmethod
    def row_features(self, y: Tensor, workspace: Workspace | None = None) -> Tensor:
        """The per-row features of shifted data `y` that `logits` and `moments` read
        (`[B, w]`, constant from pass to pass for a fixed shift, so a fit may keep them),
        written into `workspace` (a fresh tensor if None)."""

    @abstractmethod
    def data(self, rows: Tensor) -> Tensor:
        """The shifted data `y` `[B, D]` inside `row_features(y)` (a view)."""

    @abstractmethod
    def operands(self, m: Tensor, prec_chol: Tensor, bias: Tensor) -> tuple[Tensor, ...]:
        r"""What the logits of every chunk of a pass share, for shifted means `m` and the
        per-component constants $b_j = \log\pi_j + \log|\det U_j| - \tfrac D2\log 2\pi$
        (`bias`, `[K]`)."""

    @abstractmethod
    def logits(
        self, rows: Tensor, operands: tuple[Tensor, ...], workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        """`(a [B, K], features)`: the log-joint densities $a_{tj} = b_j - d_j(y_t)$ of the
        rows whose `row_features` are `rows`, and the features the moments are built from,
        written into `workspace`."""

    @abstractmethod
    def features(self, y: Tensor, ref: Tensor) -> Tensor:
        """The features of `moments` without an E-step (no whitening; the initial M-step)."""

    @abstractmethod
    def moments(
        self, rows: Tensor, features: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""`(first, second)`: the chunk's sums $F_j = \sum_t r_{tj}y_t$ and second
        moment, from its `row_features` `rows` and the `features` of `logits`."""

    def responsibility_moments(
        self, y: Tensor, ref: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        """`moments` of shifted data `y` under given responsibilities `r` (no E-step: the
        features about `ref`, unwhitened), the whole data at once."""
        return self.moments(self.row_features(y), self.features(y, ref), r, workspace)

    @abstractmethod
    def scatter(self, differences: Tensor) -> Tensor:
        r"""$\sum_t d_td_t^\top$ of `differences` `[n, D]` (overwritten), or its diagonal, trace."""

    def unwhiten(self, second: Tensor, prec_chol: Tensor | None) -> Tensor:
        """The summed second moment in data coordinates (the identity unless whitened)."""
        return second

    @abstractmethod
    def estimate(
        self, second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        """The M-step's covariance from the summed statistics, with `delta` the new means
        minus the reference of `second`."""

    # -- natural gradient ------------------------------------------------------------------

    @abstractmethod
    def natural_energies(self, x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
        """`(d, log_det)`, differentiable in the covariance itself."""

    @abstractmethod
    def mean_step(self, cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
        r"""$(\Sigma_j/N_j)\,g_{\mu_j}$."""

    @abstractmethod
    def covariance_step(
        self, cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        r"""$\Sigma + \tfrac2{N_j}\Sigma g\Sigma$ moved to the new means
        ($-\delta\delta^\top$), plus `reg`."""

    # -- unconstrained ---------------------------------------------------------------------

    @abstractmethod
    def raw(self, prec_chol: Tensor) -> Tensor:
        """$U$ -> an unconstrained tensor (log of the positive diagonal)."""

    @abstractmethod
    def raw_energies(self, x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
        """`(d, log_det)`, differentiable in all three."""

    @abstractmethod
    def raw_precision_cholesky(self, raw: Tensor) -> Tensor:
        """The unconstrained tensor -> $U$."""

    @abstractmethod
    def offset_in_units(self, prec_chol: Tensor, delta: Tensor) -> Tensor:
        r"""$L_j\delta_j$ `[K, D]`, $L_j = U_j^{-\top}$ (so $\Sigma_j = L_jL_j^\top$): offsets
        `delta` `[K, D]` of the means measured in each component's own units."""

    def zero_log_ratio(self, cov: Tensor, means: Tensor) -> Tensor:
        """The `log_ratio` of `scaled` that changes nothing (one entry per axis of every
        covariance: `cov`'s shape unless a type says otherwise)."""
        return torch.zeros_like(cov)

    @abstractmethod
    def scaled(self, cov: Tensor, log_ratio: Tensor) -> Tensor:
        r"""$L_j\exp(A_j)L_j^\top$ ($\Sigma_j = L_jL_j^\top$, `cov`): the covariances changed
        relatively by the symmetric `log_ratio` $A_j$ of their shape ($A = 0$ leaves them;
        positive definite whatever $A$)."""

    @abstractmethod
    def clip_log_ratio(self, log_ratio: Tensor, most: float) -> Tensor:
        """`log_ratio` with every eigenvalue clipped to `[-most, most]`."""

    @abstractmethod
    def regularized(self, cov: Tensor, reg: float) -> Tensor:
        r"""$\Sigma_j + \lambda I$."""

    @abstractmethod
    def unregularized(self, cov: Tensor, reg: float) -> Tensor:
        r"""$\Sigma_j - \lambda I$ with every eigenvalue $e$ of $\Sigma_j$ kept at least
        $10^{-3}e$ (positive definite; $\approx 10^{-3}\lambda$ where $\Sigma_j$ is
        $\lambda$ alone)."""


class MatrixCovariance(CovarianceModel):
    r"""What `full` and `tied` share: $U$ upper triangular with $\Sigma^{-1} = UU^\top$."""

    def precision_cholesky(self, cov: Tensor) -> Tensor:
        r"""Upper $U = L^{-\top}$ for $\Sigma = LL^\top$, batched over leading axes."""
        lower, info = torch.linalg.cholesky_ex(cov)
        if bool((info != 0).any()):
            raise ValueError(ILL_DEFINED_COVARIANCE)
        identity = eye(cov.shape[-1], cov).expand_as(cov)
        return torch.linalg.solve_triangular(lower, identity, upper=False).mT

    def precision(self, prec_chol: Tensor) -> Tensor:
        return prec_chol @ prec_chol.mT

    def from_precision(self, precision: Tensor) -> Tensor:
        return torch.linalg.inv(precision)

    def scatter(self, differences: Tensor) -> Tensor:
        return differences.T @ differences

    def raw(self, prec_chol: Tensor) -> Tensor:
        r"""$W = U^\top$ with the log of its diagonal (strictly lower part unchanged)."""
        w = prec_chol.mT
        log_diagonal = torch.log(torch.diagonal(w, dim1=-2, dim2=-1))
        return torch.tril(w, -1) + torch.diag_embed(log_diagonal)

    def offset_in_units(self, prec_chol: Tensor, delta: Tensor) -> Tensor:
        offset = torch.linalg.solve_triangular(prec_chol.mT, delta.unsqueeze(-1), upper=False)
        return offset.squeeze(-1)

    def scaled(self, cov: Tensor, log_ratio: Tensor) -> Tensor:
        lower = torch.linalg.cholesky(cov)
        return lower @ torch.linalg.matrix_exp(sym(log_ratio)) @ lower.mT

    def clip_log_ratio(self, log_ratio: Tensor, most: float) -> Tensor:
        values, vectors = torch.linalg.eigh(sym(log_ratio))
        return (vectors * values.clamp(-most, most).unsqueeze(-2)) @ vectors.mT

    def regularized(self, cov: Tensor, reg: float) -> Tensor:
        return cov + reg * eye(cov.shape[-1], cov)

    def unregularized(self, cov: Tensor, reg: float) -> Tensor:
        values, vectors = torch.linalg.eigh(cov)
        values = torch.maximum(values - reg, _KEPT * values)
        return sym((vectors * values.unsqueeze(-2)) @ vectors.mT)


class VectorCovariance(CovarianceModel):
    r"""What `diag` and `spherical` share: $U = 1/\sigma$ elementwise.

    Their logits are one quadratic form per component,
    $b_j - \tfrac12\sum_d s_{jd}(y_d - m_{jd})^2 = c_j - y^2\,(\tfrac12 s_j)^\top
    + y\,(s_j\odot m_j)^\top$ with $c_j = b_j - \tfrac12\sum_d s_{jd}m_{jd}^2$: matmuls of
    $y$ and of its squares, which also give both moments, $r^\top y$ and $r^\top y^2$.
    """

    def precision_cholesky(self, cov: Tensor) -> Tensor:
        if not bool((cov > 0).all()):
            raise ValueError(ILL_DEFINED_COVARIANCE)
        return torch.rsqrt(cov)

    def precision(self, prec_chol: Tensor) -> Tensor:
        return prec_chol * prec_chol

    def from_precision(self, precision: Tensor) -> Tensor:
        return torch.reciprocal(precision)

    def raw(self, prec_chol: Tensor) -> Tensor:
        return torch.log(prec_chol)

    def raw_precision_cholesky(self, raw: Tensor) -> Tensor:
        return torch.exp(raw)

    def offset_in_units(self, prec_chol: Tensor, delta: Tensor) -> Tensor:
        return delta / prec_chol.reshape(prec_chol.shape[0], -1)

    def scaled(self, cov: Tensor, log_ratio: Tensor) -> Tensor:
        return cov * torch.exp(log_ratio)

    def clip_log_ratio(self, log_ratio: Tensor, most: float) -> Tensor:
        return log_ratio.clamp(-most, most)

    def regularized(self, cov: Tensor, reg: float) -> Tensor:
        return cov + reg

    def unregularized(self, cov: Tensor, reg: float) -> Tensor:
        return torch.maximum(cov - reg, _KEPT * cov)

    def row_width(self, k: int, d: int) -> int:
        return 2 * d

    @staticmethod
    def quadratic_operands(m: Tensor, scale: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
        r"""$c_j = b_j - \tfrac12\sum_d s\,m^2$ `[K, 1]` and $[s\odot m, -\tfrac12 s]$
        `[K, 2D]` (the weights of the row features $[y, y^2]$)."""
        constant = bias.unsqueeze(1) - 0.5 * (m * m * scale).sum(dim=1, keepdim=True)
        return constant, torch.cat([m * scale, -0.5 * scale], dim=1)

    def features(self, y: Tensor, ref: Tensor) -> Tensor:
        return self.row_features(y)

    def row_features(self, y: Tensor, workspace: Workspace | None = None) -> Tensor:
        """$[y, y^2]$, `[B, 2D]` (written into `workspace`, a fresh tensor if None).

        Kept across passes (`fitting.PreparedChunks`), they make each chunk's E-step one
        matmul and its M-step one matmul, with no elementwise pass over the data: on a
        2-core Xeon (AVX-512), 2 threads, a float32 20-pass `diag` fit of (100k, 32, 16)
        took 0.174 s this way against 0.185 s with $y$ kept and its squares made chunk by
        chunk for two matmuls each (medians of 12 alternated fits), for twice the kept
        memory ($2D$ numbers per row).
        """
        b, d = y.shape
        shape = (b, 2 * d)
        out = y.new_empty(shape) if workspace is None else workspace.take("features", shape, y)
        out[:, :d].copy_(y)
        torch.mul(y, y, out=out[:, d:])
        return out

    def data(self, rows: Tensor) -> Tensor:
        return rows[:, : rows.shape[1] // 2]

    def logits(
        self, rows: Tensor, operands: tuple[Tensor, ...], workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""The logits, `[B, K]` (a transposed view of `[K, B]` storage): one matmul of the
        row features $[y, y^2]$ (`rows`) with $[s\odot m, -\tfrac12 s]$, offset by $c_j$.
        The features of the moments are the row features themselves.

        Components first in memory, every reduction over the components (the log-sum-exp's
        maximum and sum) runs along contiguous rows of `B` numbers, several times faster
        than across a last axis of `K` numbers, and the M-step's product reads $r^\top$
        contiguous. The offset $c_j$ carries the bias, so the matmul leaves the logits
        themselves: no elementwise pass over `[K, B]` between it and the normalization
        (the quadratic form is not clipped at zero, as in scikit-learn; it rounds below
        zero only by the cancellation of its expansion).
        """
        constant, weights = operands
        logits = workspace.take("logits", (constant.shape[0], rows.shape[0]), rows)
        torch.addmm(constant, weights, rows.T, out=logits)
        return logits.T, rows

    def responsibility_moments(
        self, y: Tensor, ref: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        """`moments` under given responsibilities, `RESPONSIBILITY_ROWS` rows at a time
        (the row features of each chunk in `workspace`)."""
        total = None
        for start in range(0, y.shape[0], RESPONSIBILITY_ROWS):
            rows = self.row_features(y[start : start + RESPONSIBILITY_ROWS], workspace)
            sums = self.moments(rows, rows, r[start : start + RESPONSIBILITY_ROWS], workspace)
            total = sums if total is None else (total[0] + sums[0], total[1] + sums[1])
        return total

    def moments(
        self, rows: Tensor, features: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""$F_j = \sum_t r_{tj}y_t$ and $\sum_t r_{tj}y_t^2$, `([K, D], [K, D])`: one
        matmul $r^\top[y, y^2]$ (`rows` $= [y, y^2]$; `features` are the same)."""
        sums = r.T @ rows
        d = rows.shape[1] // 2
        return sums[:, :d], sums[:, d:]

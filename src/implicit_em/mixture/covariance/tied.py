r"""`tied`: one full covariance shared by every component, $\Sigma$ `[D, D]`, $U$ upper
triangular.

The logits expand the quadratic form about the whitened data $yU$; the second moment is
the plain $\sum_t y_ty_t^\top$ about the shift (rows of `r` sum to one), from which the
M-step subtracts the between-component scatter.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.distances import full_mahalanobis, whitening_factor
from implicit_em.mixture.covariance.base import MatrixCovariance, eye, sym
from implicit_em.mixture.workspace import Workspace

__all__ = ["Tied"]


class Tied(MatrixCovariance):
    """One full covariance shared by every component."""

    name = "tied"
    per_component = False

    def second_shape(self, k: int, d: int) -> tuple[int, ...]:
        return (d, d)

    def n_parameters(self, k: int, d: int) -> int:
        return d * (d + 1) // 2

    def log_det(self, prec_chol: Tensor, k: int, d: int) -> Tensor:
        return torch.log(torch.diagonal(prec_chol)).sum().expand(k)

    def noise(self, cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
        return z @ torch.linalg.cholesky(cov).T

    def row_width(self, k: int, d: int) -> int:
        return d

    def row_features(self, y: Tensor, workspace: Workspace | None = None) -> Tensor:
        """`y` itself."""
        return y

    def data(self, rows: Tensor) -> Tensor:
        return rows

    def operands(self, m: Tensor, prec_chol: Tensor, bias: Tensor) -> tuple[Tensor, ...]:
        r"""$U$, $(m_jU)^\top$ `[D, K]` and $b_j - \tfrac12\lVert m_jU\rVert^2$ `[K]`."""
        mu = m @ prec_chol
        return prec_chol, mu.T, bias - 0.5 * (mu * mu).sum(dim=1)

    def logits(
        self, rows: Tensor, operands: tuple[Tensor, ...], workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""$a_j = b_j - \tfrac12\lVert m_jU\rVert^2 + (m_jU)\cdot(yU) - \tfrac12\lVert yU\rVert^2$,
        `[B, K]`, and `y` (the features of `moments`), with every intermediate written into
        `workspace`."""
        prec_chol, mu, constant = operands
        y = rows
        (b, d), k = y.shape, mu.shape[1]
        whitened = torch.mm(y, prec_chol, out=workspace.take("whitened", (b, d), y))
        logits = workspace.take("logits", (b, k), y)
        torch.addmm(constant, whitened, mu, out=logits)
        squares = torch.mul(whitened, whitened, out=workspace.take("squares", (b, d), y))
        return logits.sub_(squares.sum(dim=1, keepdim=True), alpha=0.5), y

    def features(self, y: Tensor, ref: Tensor) -> Tensor:
        return y

    def moments(
        self, rows: Tensor, features: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""$F_j$ and $\sum_t (y_t - s)(y_t - s)^\top$ (rows of `r` sum to 1)."""
        return r.T @ rows, rows.T @ rows

    def estimate(
        self, second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        between = (delta * n[:, None]).T @ delta
        cov = (second - between) / n_total
        return sym(cov) + reg * eye(cov.shape[-1], cov)

    def natural_energies(self, x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
        lower = torch.linalg.cholesky(cov)
        diff = (x.unsqueeze(0) - means.unsqueeze(1)).mT
        z = torch.linalg.solve_triangular(lower, diff, upper=False)
        log_det = -torch.log(torch.diagonal(lower)).sum().expand(means.shape[0])
        return 0.5 * (z * z).sum(dim=1).T, log_det

    def mean_step(self, cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
        return grad @ cov / n[:, None]

    def covariance_step(
        self, cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        step = 2.0 * cov @ sym(grad) @ cov / n_total
        shift = (delta * n[:, None]).T @ delta / n_total
        cov = sym(cov + step - shift)
        return cov + reg * eye(cov.shape[-1], cov)

    def raw_energies(self, x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
        k = means.shape[0]
        w = whitening_factor(raw).expand(k, -1, -1)
        return full_mahalanobis(x, means, w), torch.diagonal(raw).sum().expand(k)

    def raw_precision_cholesky(self, raw: Tensor) -> Tensor:
        return whitening_factor(raw).T

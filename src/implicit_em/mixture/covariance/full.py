r"""`full`: one full covariance per component, $\Sigma_j$ `[K, D, D]`, $U_j$ upper triangular.

The E-step whitens the residuals, $z_{tj} = U_j^\top(x_t-\mu_j)$, and the M-step accumulates
the scatter about the current means from them:
$\sum_t r_{tj}(x_t-\mu_j)(x_t-\mu_j)^\top = U_j^{-\top}\big(\sum_t r_{tj}z_{tj}z_{tj}^\top\big)
U_j^{-1}$ (differences first: no cancellation; one batched matmul; `unwhiten` applies the
K small triangular factors once per pass).
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.distances import full_mahalanobis, whitening_factor
from implicit_em.mixture.covariance.base import (
    RESPONSIBILITY_ROWS,
    MatrixCovariance,
    eye,
    sym,
)
from implicit_em.mixture.workspace import Workspace

__all__ = ["FEATURES_LAST_FROM", "Full"]

FEATURES_LAST_FROM = 16
"""The least `D` for which the E-step writes its residuals features last (`Full.logits`)."""


def residual_logits(z: Tensor, bias: Tensor, workspace: Workspace) -> Tensor:
    r"""$a_{tj} = b_j - \tfrac12\lVert z_{tj}\rVert^2$ of residuals `z[K, D, B]` and
    `bias` $b$ `[K, 1]`, `[K, B]`, written into `workspace`.

    Features last (`z` a transposed view), one `vector_norm` over the contiguous axis reads
    `z` once; rows last, where that reduction runs across strides and is many times slower,
    the squares go to a workspace buffer first. Either way no tensor is allocated per chunk
    (`torch.linalg.vecdot` allocates a `[K, D, B]` array of squares, whose page faults cost
    about 45 ms of system time per float32 pass over (200k, 32, 16) on a 2-core EPYC), and
    one `addcmul` squares the norms (or halves the sums), negates and adds the bias.
    """
    k, _, b = z.shape
    logits = workspace.take("logits", (k, b), z)
    if z.mT.is_contiguous():
        norms = torch.linalg.vector_norm(z, dim=1, out=logits)
        return torch.addcmul(bias, norms, norms, value=-0.5, out=logits)
    squares = torch.mul(z, z, out=workspace.take("squares", z.shape, z))
    sums = torch.sum(squares, dim=1, out=logits)
    return torch.add(bias, sums, alpha=-0.5, out=logits)


class Full(MatrixCovariance):
    """One full covariance per component."""

    name = "full"
    centered = True

    def second_shape(self, k: int, d: int) -> tuple[int, ...]:
        return (k, d, d)

    def n_parameters(self, k: int, d: int) -> int:
        return k * d * (d + 1) // 2

    def log_det(self, prec_chol: Tensor, k: int, d: int) -> Tensor:
        return torch.log(torch.diagonal(prec_chol, dim1=-2, dim2=-1)).sum(dim=-1)

    def noise(self, cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
        return (torch.linalg.cholesky(cov)[labels] @ z.unsqueeze(-1)).squeeze(-1)

    def row_width(self, k: int, d: int) -> int:
        return k * d

    def row_features(self, y: Tensor, workspace: Workspace | None = None) -> Tensor:
        """The augmented rows $[y, 1]$, `[B, D+1]`."""
        b, d = y.shape
        shape = (b, d + 1)
        out = y.new_empty(shape) if workspace is None else workspace.take("augmented", shape, y)
        out[:, :d] = y
        out[:, d] = 1.0
        return out

    def data(self, rows: Tensor) -> Tensor:
        return rows[:, :-1]

    def operands(self, m: Tensor, prec_chol: Tensor, bias: Tensor) -> tuple[Tensor, ...]:
        r"""The augmented factors $\big[\begin{smallmatrix}U_j \\ -m_j^\top U_j
        \end{smallmatrix}\big]$ (`[K, D+1, D]` for $D \ge 16$, stacked and transposed to
        `[K·D, D+1]` below) and `bias` as a column, `[K, 1]`."""
        k, d = m.shape
        factors = torch.cat([prec_chol, -(m.unsqueeze(1) @ prec_chol)], dim=1)
        if d < FEATURES_LAST_FROM:
            factors = factors.mT.reshape(k * d, d + 1)
        return factors, bias.unsqueeze(1)

    def logits(
        self, rows: Tensor, operands: tuple[Tensor, ...], workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""$a_j = b_j - \tfrac12\lVert z_j\rVert^2$ and the whitened residuals
        $z_j = U_j^\top(y-m_j)$, `([B, K], [K, D, B])`, from one matmul of the augmented
        rows $[y, 1]$.

        The residuals are written into `workspace` in one of two layouts, chosen by $D$:

        * $D \ge 16$, features last: $z_j^\top = [y, 1]\big[\begin{smallmatrix}U_j \\
          -m_j^\top U_j\end{smallmatrix}\big]$, one batched `[B, D+1] @ [D+1, D]` product
          into `[K, B, D]` storage, returned as its transposed `[K, D, B]` view. Each
          component's block is contiguous, which keeps the product's writes and the M-step's
          batched matmul fast (a float32 pass over (200k, 32, 16) took 0.15-0.20 s, against
          0.21-0.31 s rows last, on a 2-core EPYC, AVX2).
        * $D < 16$, rows last: the stacked factors times $[y, 1]^\top$, one
          `[K·D, D+1] @ [D+1, B]` product into `[K, D, B]`: a few features are too narrow a
          last axis for the vector units (2-3 times faster than features last at $D \le 8$
          on the same machine).

        Either way `a` is a transposed view of `residual_logits`.
        """
        factors, bias = operands
        b, d = rows.shape[0], rows.shape[1] - 1
        if d >= FEATURES_LAST_FROM:
            k = factors.shape[0]
            z = workspace.take("residuals", (k, b, d), rows)
            z = torch.bmm(rows.expand(k, b, d + 1), factors, out=z).mT
        else:
            k = factors.shape[0] // d
            z = workspace.take("residuals", (k * d, b), rows)
            z = torch.mm(factors, rows.T, out=z).view(k, d, b)
        return residual_logits(z, bias, workspace).T, z

    def features(self, y: Tensor, ref: Tensor) -> Tensor:
        r"""Residuals $y - \mathrm{ref}_j$ with no whitening ($U = I$), `[K, D, B]`."""
        return y.T.unsqueeze(0) - ref.unsqueeze(-1)

    def moments(
        self, rows: Tensor, features: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""$F_j$ and the whitened scatter $G_j = \sum_t r_{tj}\,z_{tj}z_{tj}^\top$,
        `([K, D], [K, D, D])`: one batched matmul of $\sqrt{r_{tj}}\,z_{tj}$ with itself
        (`features` is weighted in place: it is the chunk's scratch)."""
        scale = torch.sqrt(r.T, out=workspace.take("scale", (r.shape[1], r.shape[0]), r))
        weighted = features.mul_(scale.unsqueeze(1))
        return r.T @ self.data(rows), weighted @ weighted.mT

    def responsibility_moments(
        self, y: Tensor, ref: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        r"""$F_j$ and $S_j = \sum_t r_{tj}(y_t - \mathrm{ref}_j)(y_t - \mathrm{ref}_j)^\top$
        under given (soft) responsibilities, `RESPONSIBILITY_ROWS` rows at a time through
        `moments` (hard starts take `label_start`'s path)."""
        second = y.new_zeros(self.second_shape(*ref.shape))
        for start in range(0, y.shape[0], RESPONSIBILITY_ROWS):
            chunk, weights = (
                y[start : start + RESPONSIBILITY_ROWS],
                r[start : start + RESPONSIBILITY_ROWS],
            )
            features = self.features(chunk, ref)
            second += self.moments(self.row_features(chunk), features, weights, workspace)[1]
        return r.T @ y, second

    def unwhiten(self, second: Tensor, prec_chol: Tensor | None) -> Tensor:
        r"""$S_j = U_j^{-\top} G_j U_j^{-1}$ (`U` of the E-step that whitened the residuals;
        `None` for none)."""
        if prec_chol is None:
            return second
        identity = eye(prec_chol.shape[-1], prec_chol).expand_as(prec_chol)
        inverse = torch.linalg.solve_triangular(prec_chol, identity, upper=True)
        return inverse.mT @ second @ inverse

    def estimate(
        self, second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        cov = second / n[:, None, None] - delta.unsqueeze(-1) * delta.unsqueeze(-2)
        return sym(cov) + reg * eye(cov.shape[-1], cov)

    def natural_energies(self, x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
        lower = torch.linalg.cholesky(cov)
        diff = (x.unsqueeze(0) - means.unsqueeze(1)).mT
        z = torch.linalg.solve_triangular(lower, diff, upper=False)
        log_det = -torch.log(torch.diagonal(lower, dim1=-2, dim2=-1)).sum(dim=-1)
        return 0.5 * (z * z).sum(dim=1).T, log_det

    def mean_step(self, cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
        return (cov @ grad.unsqueeze(-1)).squeeze(-1) / n[:, None]

    def covariance_step(
        self, cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        step = 2.0 * cov @ sym(grad) @ cov / n[:, None, None]
        cov = sym(cov + step - delta.unsqueeze(-1) * delta.unsqueeze(-2))
        return cov + reg * eye(cov.shape[-1], cov)

    def raw_energies(self, x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
        log_det = torch.diagonal(raw, dim1=-2, dim2=-1).sum(dim=-1)
        return full_mahalanobis(x, means, whitening_factor(raw)), log_det

    def raw_precision_cholesky(self, raw: Tensor) -> Tensor:
        return whitening_factor(raw).mT

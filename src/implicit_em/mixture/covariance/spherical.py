r"""`spherical`: one variance per component, $\sigma^2_j$ `[K]`, $U = 1/\sigma$.

The diagonal quadratic form with one scale per component (`VectorCovariance`); the second
moment is the trace of the diagonal one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.distances import diagonal_mahalanobis
from implicit_em.mixture.covariance.base import VectorCovariance
from implicit_em.mixture.workspace import Workspace

__all__ = ["Spherical"]


class Spherical(VectorCovariance):
    """One variance per component."""

    name = "spherical"

    def second_shape(self, k: int, d: int) -> tuple[int, ...]:
        return (k,)

    def n_parameters(self, k: int, d: int) -> int:
        return k

    def log_det(self, prec_chol: Tensor, k: int, d: int) -> Tensor:
        return d * torch.log(prec_chol)

    def noise(self, cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
        return torch.sqrt(cov)[labels, None] * z

    def operands(self, m: Tensor, prec_chol: Tensor, bias: Tensor) -> tuple[Tensor, ...]:
        scale = (prec_chol * prec_chol).unsqueeze(1).expand_as(m)
        return self.quadratic_operands(m, scale, bias)

    def moments(
        self, rows: Tensor, features: Tensor, r: Tensor, workspace: Workspace
    ) -> tuple[Tensor, Tensor]:
        first, second = super().moments(rows, features, r, workspace)
        return first, second.sum(dim=1)

    def scatter(self, differences: Tensor) -> Tensor:
        r"""$\sum_t \lVert d_t\rVert^2$, `[]`: one dot product of the rows with themselves."""
        flat = differences.reshape(-1)
        return flat @ flat

    def estimate(
        self, second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        var = (second / n - (delta * delta).sum(dim=1)) / delta.shape[1]
        return var.clamp_min(0.0) + reg

    def zero_log_ratio(self, cov: Tensor, means: Tensor) -> Tensor:
        """One entry per axis, `[K, D]`, as `diag`'s (see `scaled`)."""
        return torch.zeros_like(means)

    def scaled(self, cov: Tensor, log_ratio: Tensor) -> Tensor:
        r"""$\sigma_j^2\exp(\bar a_j)$, $\bar a_j$ the mean of the axes' log-ratios: a gradient
        step changes the shared variance as `diag`'s would change $D$ equal variances, not
        $D$ times as much."""
        return cov * torch.exp(log_ratio.mean(dim=1))

    def natural_energies(self, x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
        diff = x.unsqueeze(1) - means
        d = 0.5 * (diff * diff).sum(dim=-1) / cov
        return d, -0.5 * means.shape[1] * torch.log(cov)

    def mean_step(self, cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
        return cov[:, None] * grad / n[:, None]

    def covariance_step(
        self, cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        dim = delta.shape[1]
        var = cov + 2.0 * cov * cov * grad / (dim * n) - (delta * delta).sum(dim=1) / dim
        return var.clamp_min(0.0) + reg

    def raw_energies(self, x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
        scales = raw.unsqueeze(1).expand_as(means)
        return diagonal_mahalanobis(x, means, scales), raw * means.shape[1]

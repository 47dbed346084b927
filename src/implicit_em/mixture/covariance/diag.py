r"""`diag`: one diagonal covariance per component, variances $\sigma^2_{jd}$ `[K, D]`,
$U = 1/\sigma$.

Logits and moments are linear in the features $[y, y^2]$ (`VectorCovariance`); the second
moment is taken about the shift, and the variances are clipped at zero before `reg_covar`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.distances import diagonal_mahalanobis
from implicit_em.mixture.covariance.base import VectorCovariance

__all__ = ["Diag"]


class Diag(VectorCovariance):
    """One diagonal covariance per component."""

    name = "diag"

    def second_shape(self, k: int, d: int) -> tuple[int, ...]:
        return (k, d)

    def n_parameters(self, k: int, d: int) -> int:
        return k * d

    def log_det(self, prec_chol: Tensor, k: int, d: int) -> Tensor:
        return torch.log(prec_chol).sum(dim=1)

    def noise(self, cov: Tensor, labels: Tensor, z: Tensor) -> Tensor:
        return torch.sqrt(cov)[labels] * z

    def operands(self, m: Tensor, prec_chol: Tensor, bias: Tensor) -> tuple[Tensor, ...]:
        return self.quadratic_operands(m, prec_chol * prec_chol, bias)

    def scatter(self, differences: Tensor) -> Tensor:
        r"""$\sum_t d_t^2$, `[D]`: the squares in place, summed by one matrix-vector product."""
        return differences.new_ones(differences.shape[0]) @ differences.square_()

    def estimate(
        self, second: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        return (second / n[:, None] - delta * delta).clamp_min(0.0) + reg

    def natural_energies(self, x: Tensor, means: Tensor, cov: Tensor) -> tuple[Tensor, Tensor]:
        diff = x.unsqueeze(1) - means
        d = 0.5 * (diff * diff / cov).sum(dim=-1)
        return d, -0.5 * torch.log(cov).sum(dim=1)

    def mean_step(self, cov: Tensor, grad: Tensor, n: Tensor) -> Tensor:
        return cov * grad / n[:, None]

    def covariance_step(
        self, cov: Tensor, grad: Tensor, n: Tensor, delta: Tensor, n_total: Tensor, reg: float
    ) -> Tensor:
        return (cov + 2.0 * cov * cov * grad / n[:, None] - delta * delta).clamp_min(0.0) + reg

    def raw_energies(self, x: Tensor, means: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
        return diagonal_mahalanobis(x, means, raw), raw.sum(dim=1)

r"""The parameters of a Gaussian mixture and the per-sample quantities they define.

:math:`p(x) = \sum_j \pi_j \mathcal N(x \mid \mu_j, \Sigma_j)` with
:math:`\log \mathcal N = -\tfrac D2\log 2\pi - d_j(x) + \log|\det U_j|`. The per-sample
log-likelihood is the core's log-sum-exp, :func:`implicit_em.lse`, of the energies
:math:`d_j - \log|\det U_j|` under the log-prior :math:`\log\pi`, and the responsibilities are
:math:`r_{tj} = \pi_j e^{-d_j + \log|\det U_j|} / \sum_k \pi_k e^{-d_k + \log|\det U_k|}`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from implicit_em.core import lse
from implicit_em.mixture.covariance import CovarianceModel

__all__ = ["Mixture", "log_likelihood_and_responsibilities"]


@dataclass(frozen=True)
class Mixture:
    """Mixture parameters as tensors (shapes in :mod:`implicit_em.mixture.covariance`).

    Attributes:
        model: the covariance type's functions.
        weights: :math:`\\pi`, ``[K]``, on the simplex.
        means: :math:`\\mu`, ``[K, D]``.
        covariances: :math:`\\Sigma` in the type's shape.
        precisions_cholesky: :math:`U`, with :math:`\\Sigma^{-1} = UU^\\top`.
    """

    model: CovarianceModel
    weights: Tensor
    means: Tensor
    covariances: Tensor
    precisions_cholesky: Tensor

    @classmethod
    def from_covariances(
        cls, model: CovarianceModel, weights: Tensor, means: Tensor, covariances: Tensor
    ) -> Mixture:
        """Complete the parameters with :math:`U` (``ValueError`` if a covariance is singular)."""
        prec_chol = model.precision_cholesky(covariances)
        return cls(model, weights, means, covariances, prec_chol)

    @classmethod
    def from_precisions_cholesky(
        cls, model: CovarianceModel, weights: Tensor, means: Tensor, prec_chol: Tensor
    ) -> Mixture:
        """Complete the parameters with :math:`\\Sigma = (UU^\\top)^{-1}`, in canonical form."""
        if not bool(torch.isfinite(prec_chol).all()):
            raise ValueError(
                "The step produced non-finite parameters (the fit diverged); lower learning_rate."
            )
        covariances = model.from_precision(model.precision(prec_chol))
        return cls.from_covariances(model, weights, means, covariances)

    @property
    def n_components(self) -> int:
        return self.means.shape[0]

    @property
    def n_features(self) -> int:
        return self.means.shape[1]

    @property
    def shift(self) -> Tensor:
        r"""The mixture mean :math:`s = \sum_j \pi_j\mu_j`, the shift of the EM statistics."""
        return self.weights @ self.means

    def to(self, dtype: torch.dtype, device: torch.device | str) -> Mixture:
        """The same parameters as ``dtype`` tensors on ``device``."""
        return replace(
            self,
            weights=self.weights.to(device=device, dtype=dtype),
            means=self.means.to(device=device, dtype=dtype),
            covariances=self.covariances.to(device=device, dtype=dtype),
            precisions_cholesky=self.precisions_cholesky.to(device=device, dtype=dtype),
        )

    def n_free_parameters(self) -> int:
        """Free parameters: covariances, means and :math:`K-1` weights (for BIC and AIC)."""
        k, d = self.n_components, self.n_features
        return self.model.n_parameters(k, d) + k * d + k - 1


def log_likelihood_and_responsibilities(
    x: Tensor, mixture: Mixture, shift: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r"""The E-step of one chunk ``x[B, D]``.

    Returns ``(log p(x_t) [B], r [B, K], y [B, D])`` where ``y = x - shift`` are the shifted
    data the statistics are accumulated from. The normalizer is the core's :func:`lse`.
    """
    y = x - shift
    m = mixture.means - shift
    model = mixture.model
    k, dim = mixture.n_components, mixture.n_features
    energy = model.energies(y, m, mixture.precisions_cholesky) - model.log_det(
        mixture.precisions_cholesky, k, dim
    )
    log_prior = torch.log(mixture.weights)
    log_norm = lse(energy, dim=-1, log_prior=log_prior)
    r = torch.exp(log_prior - energy - log_norm.unsqueeze(-1))
    return log_norm - 0.5 * dim * math.log(2.0 * math.pi), r, y

r"""The parameters of a Gaussian mixture and the per-sample quantities they define.

:math:`p(x) = \sum_j \pi_j \mathcal N(x \mid \mu_j, \Sigma_j)` with
:math:`\log \mathcal N = -\tfrac D2\log 2\pi - d_j(x) + \log|\det U_j|`. The per-sample
log-likelihood is the log-sum-exp (the core's :func:`implicit_em.lse`, fused with the
responsibilities in :func:`normalize`) of the energies
:math:`d_j - \log|\det U_j|` under the log-prior :math:`\log\pi`, and the responsibilities are
:math:`r_{tj} = \pi_j e^{-d_j + \log|\det U_j|} / \sum_k \pi_k e^{-d_k + \log|\det U_k|}`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from implicit_em.mixture.covariance import CovarianceModel
from implicit_em.mixture.workspace import Workspace

__all__ = ["EStep", "Mixture", "log_likelihood_and_responsibilities", "normalize"]


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


def normalize(logits: Tensor) -> tuple[Tensor, Tensor]:
    r"""Log-sum-exp and softmax of ``logits[B, K]`` along ``K`` from one exponential, in place.

    With :math:`a_{tj} = \log\pi_j - d_j + \log|\det U_j|` and :math:`m_t = \max_j a_{tj}`:
    :math:`e_{tj} = \exp(\max(a_{tj} - m_t, \tfrac12\log\tau))`,
    :math:`\log p_t = m_t + \log\sum_j e_{tj}` (the core's :func:`implicit_em.lse`, max-shifted)
    and :math:`r_{tj} = e_{tj}/\sum_k e_{tk}`. ``logits`` is overwritten with ``r``.

    The floor :math:`\sqrt\tau` (:math:`\tau` the dtype's smallest normal number: about
    1e-19 in float32, 1e-154 in float64) keeps the exponential, the square roots of ``r`` and
    the products of the M-step off the CPU's slow subnormal path (``exp`` of a float32 below
    -87 is about 25 times slower). It changes :math:`\log p_t` by at most
    :math:`K\sqrt\tau` and a component's mass by at most :math:`N\sqrt\tau`: far below
    rounding. Returns ``(log p [B], r [B, K])``.
    """
    floor = 0.5 * math.log(torch.finfo(logits.dtype).tiny)
    peak = logits.amax(dim=1, keepdim=True)
    r = logits.sub_(peak).clamp_min_(floor).exp_()
    total = r.sum(dim=1, keepdim=True)
    r.div_(total)
    return (peak + total.log_()).squeeze(1), r


@dataclass(frozen=True)
class EStep:
    r"""What the E-step of every chunk of one pass shares, computed once per pass.

    Attributes:
        model: the covariance type's functions.
        shift: :math:`s`, ``[D]``; chunks are shifted to :math:`y = x - s`.
        operands: the type's per-pass operands for the shifted means :math:`\mu_j - s`
            (:attr:`~implicit_em.mixture.covariance.CovarianceModel.operands`).
        bias: :math:`\log\pi_j + \log|\det U_j| - \tfrac D2\log 2\pi`, ``[K]``.
    """

    model: CovarianceModel
    shift: Tensor
    operands: tuple[Tensor, ...]
    bias: Tensor

    @classmethod
    def of(cls, mixture: Mixture, shift: Tensor) -> EStep:
        """The constants of ``mixture``'s E-step about ``shift``."""
        model = mixture.model
        k, dim = mixture.n_components, mixture.n_features
        log_det = model.log_det(mixture.precisions_cholesky, k, dim)
        bias = torch.log(mixture.weights) + log_det - 0.5 * dim * math.log(2.0 * math.pi)
        operands = model.operands(mixture.means - shift, mixture.precisions_cholesky)
        return cls(model, shift, operands, bias)


def log_likelihood_and_responsibilities(
    x: Tensor, e_step: EStep, workspace: Workspace | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""The E-step of one chunk ``x[B, D]`` with the pass's constants ``e_step``.

    Returns ``(log p(x_t) [B], r [B, K], y [B, D], features)`` where ``y = x - shift`` are the
    shifted data the statistics are accumulated from and ``features`` what the covariance type's
    energies were computed from (reused by its ``moments``). ``features`` live in ``workspace``
    (a fresh one if None): pass the same workspace for every chunk of a pass.
    """
    y = x - e_step.shift
    workspace = Workspace() if workspace is None else workspace
    energy, features = e_step.model.energies(y, e_step.operands, workspace)
    logits = torch.sub(e_step.bias.expand_as(energy), energy, out=energy)
    log_p, r = normalize(logits)
    return log_p, r, y, features

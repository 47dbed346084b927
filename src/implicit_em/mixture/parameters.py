r"""The parameters of a Gaussian mixture and the per-sample quantities they define.

$p(x) = \sum_j \pi_j \mathcal N(x \mid \mu_j, \Sigma_j)$ with
$\log \mathcal N = -\tfrac D2\log 2\pi - d_j(x) + \log|\det U_j|$. The per-sample
log-likelihood is the log-sum-exp (the core's `implicit_em.lse`, fused with the
responsibilities in `normalize`) of the logits
$a_j = \log\pi_j - d_j + \log|\det U_j| - \tfrac D2\log 2\pi$ (`CovarianceModel.logits`), and
the responsibilities are
$r_{tj} = \pi_j e^{-d_j + \log|\det U_j|} / \sum_k \pi_k e^{-d_k + \log|\det U_k|}$.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from implicit_em.mixture.covariance import CovarianceModel
from implicit_em.mixture.workspace import Workspace

__all__ = [
    "EStep",
    "Mixture",
    "log_likelihood_and_responsibilities",
    "normalize",
    "responsibilities",
    "row_features",
]


@dataclass(frozen=True)
class Mixture:
    """Mixture parameters as tensors (shapes in `implicit_em.mixture.covariance`).

    Attributes
    ----------
    model : CovarianceModel
        The covariance type's functions.
    weights : Tensor
        $\\pi$, `[K]`, on the simplex.
    means : Tensor
        $\\mu$, `[K, D]`.
    covariances : Tensor
        $\\Sigma$ in the type's shape.
    precisions_cholesky : Tensor
        $U$, with $\\Sigma^{-1} = UU^\\top$.
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
        """Complete the parameters with $U$ (`ValueError` if a covariance is singular)."""
        prec_chol = model.precision_cholesky(covariances)
        return cls(model, weights, means, covariances, prec_chol)

    @classmethod
    def from_precisions_cholesky(
        cls, model: CovarianceModel, weights: Tensor, means: Tensor, prec_chol: Tensor
    ) -> Mixture:
        """Complete the parameters with $\\Sigma = (UU^\\top)^{-1}$, in canonical form."""
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
        r"""The mixture mean $s = \sum_j \pi_j\mu_j$, the shift of the EM statistics."""
        return self.weights @ self.means

    def to(self, dtype: torch.dtype, device: torch.device | str) -> Mixture:
        """The same parameters as `dtype` tensors on `device`."""
        return replace(
            self,
            weights=self.weights.to(device=device, dtype=dtype),
            means=self.means.to(device=device, dtype=dtype),
            covariances=self.covariances.to(device=device, dtype=dtype),
            precisions_cholesky=self.precisions_cholesky.to(device=device, dtype=dtype),
        )

    def n_free_parameters(self) -> int:
        """Free parameters: covariances, means and $K-1$ weights (for BIC and AIC)."""
        k, d = self.n_components, self.n_features
        return self.model.n_parameters(k, d) + k * d + k - 1


def normalize(logits: Tensor) -> tuple[Tensor, Tensor]:
    r"""Log-sum-exp and softmax of `logits[B, K]` along `K` from one exponential, in place.

    With $a_{tj} = \log\pi_j - d_j + \log|\det U_j|$ and $m_t = \max_j a_{tj}$:
    $e_{tj} = \exp(\max(a_{tj} - m_t, \tfrac12\log\tau))$,
    $\log p_t = m_t + \log\sum_j e_{tj}$ (the core's `implicit_em.lse`, max-shifted)
    and $r_{tj} = e_{tj}/\sum_k e_{tk}$. `logits` is overwritten with `r`.

    The floor $\sqrt\tau$ ($\tau$ the dtype's smallest normal number: about
    1e-19 in float32, 1e-154 in float64) keeps the exponential, the square roots of `r` and
    the products of the M-step off the CPU's slow subnormal path (`exp` of a float32 below
    -87 is about 25 times slower). It changes $\log p_t$ by at most
    $K\sqrt\tau$ and a component's mass by at most $N\sqrt\tau$: far below
    rounding. Returns `(log p [B], r [B, K])`.
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

    Attributes
    ----------
    model : CovarianceModel
        The covariance type's functions.
    shift : Tensor
        $s$, `[D]`; chunks are shifted to $y = x - s$.
    operands : tuple of Tensor
        The type's per-pass operands for the shifted means $\mu_j - s$ and the bias
        $b_j = \log\pi_j + \log|\det U_j| - \tfrac D2\log 2\pi$ (`CovarianceModel.operands`).
    """

    model: CovarianceModel
    shift: Tensor
    operands: tuple[Tensor, ...]

    @classmethod
    def of(cls, mixture: Mixture, shift: Tensor) -> EStep:
        """The constants of `mixture`'s E-step about `shift`."""
        model = mixture.model
        k, dim = mixture.n_components, mixture.n_features
        log_det = model.log_det(mixture.precisions_cholesky, k, dim)
        bias = torch.log(mixture.weights) + log_det - 0.5 * dim * math.log(2.0 * math.pi)
        operands = model.operands(mixture.means - shift, mixture.precisions_cholesky, bias)
        return cls(model, shift, operands)


def row_features(x: Tensor, e_step: EStep, workspace: Workspace | None = None) -> Tensor:
    """The covariance type's `row_features` of the shifted chunk $y = x - s$: what the
    E-step of `x` reads, the same at every pass with the same shift. Written into
    `workspace`, or fresh tensors if None (to be kept)."""
    if workspace is None:
        return e_step.model.row_features(x - e_step.shift)
    y = torch.sub(x, e_step.shift, out=workspace.take("shifted", x.shape, x))
    return e_step.model.row_features(y, workspace)


def responsibilities(
    rows: Tensor, e_step: EStep, workspace: Workspace
) -> tuple[Tensor, Tensor, Tensor]:
    r"""The E-step of one chunk from its `row_features` `rows`, with the pass's constants.

    Returns `(log p(x_t) [B], r [B, K], features)`, `features` what the covariance type's
    logits were computed from (reused by its `moments`). `r` and `features` live in
    `workspace`, valid until the next chunk's E-step: pass the same workspace for every
    chunk of a pass, and copy what is kept.
    """
    logits, features = e_step.model.logits(rows, e_step.operands, workspace)
    log_p, r = normalize(logits)
    return log_p, r, features


def log_likelihood_and_responsibilities(
    x: Tensor, e_step: EStep, workspace: Workspace | None = None
) -> tuple[Tensor, Tensor]:
    r"""`(log p(x_t) [B], r [B, K])` of a chunk `x[B, D]` with the pass's constants
    `e_step`; `r` lives in `workspace` (a fresh one if None) until its next use."""
    workspace = Workspace() if workspace is None else workspace
    log_p, r, _ = responsibilities(row_features(x, e_step, workspace), e_step, workspace)
    return log_p, r

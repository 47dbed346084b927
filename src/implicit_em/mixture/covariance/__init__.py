r"""Per-covariance-type Gaussian math: one module per type, one registry line each.

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

Every type implements `CovarianceModel` (`base`), in three families:

* **EM** (closed form): `logits` $\log\pi_j + \log\mathcal N(y\mid m_j, \Sigma_j)$ of
  shifted data $y = x - s$ (batched matmuls, never a Python loop over K; the per-component
  constants folded into the type's `operands`), which also return the chunk's *features*,
  `moments` (the chunk's sums, built from those features, so the M-step reuses the E-step's
  work), and `estimate`, the
  M-step from the summed statistics. The statistics are plain sums, so chunks and ranks add,
  and variances are clipped at zero before `reg_covar` is added: never negative, in float32
  too. `full` takes its scatter about the current means from the whitened residuals; the
  other types take theirs about the shared shift $s$, which removes the data's offset.
* **Natural parameters** (`preconditioned`): `natural_energies` is differentiable in the
  covariance itself, and `mean_step` / `covariance_step` apply Xu & Jordan's preconditioners
  $P_{\mu_j} = \Sigma_j/N_j$ and $P_{\Sigma_j} = \tfrac2{N_j}\Sigma_j\otimes\Sigma_j$.
* **Unconstrained parameters** (`gd`, `adam`): a raw tensor mapped to the whitening factor
  $W_j = U_j^\top$ (lower triangular, positive diagonal), with energies from
  `implicit_em.distances`.

A new type is a new module with a `CovarianceModel` subclass and one line in
`COVARIANCE_TYPES`.
"""

from __future__ import annotations

from implicit_em.mixture.covariance.base import ILL_DEFINED_COVARIANCE, CovarianceModel
from implicit_em.mixture.covariance.diag import Diag
from implicit_em.mixture.covariance.full import Full
from implicit_em.mixture.covariance.spherical import Spherical
from implicit_em.mixture.covariance.tied import Tied

__all__ = ["COVARIANCE_TYPES", "ILL_DEFINED_COVARIANCE", "CovarianceModel", "covariance_model"]

COVARIANCE_TYPES: dict[str, CovarianceModel] = {
    "full": Full(),
    "tied": Tied(),
    "diag": Diag(),
    "spherical": Spherical(),
}


def covariance_model(name: str) -> CovarianceModel:
    """The `CovarianceModel` for `name`; `ValueError` for an unknown type."""
    try:
        return COVARIANCE_TYPES[name]
    except KeyError:
        raise ValueError(
            f"covariance_type must be one of {sorted(COVARIANCE_TYPES)}, got {name!r}"
        ) from None

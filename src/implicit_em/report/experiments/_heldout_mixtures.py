r"""T3 on held-out data: does gradient descent reach the likelihood that EM reaches?

A full-covariance Gaussian mixture with weights $\pi = \operatorname{softmax}(a)$, means $\mu_j$
and upper-triangular precision factors $U_j$ (positive diagonal, kept as its logarithm) gives
each row the component energies

$$
e_{tj} = -\log\pi_j - \log\lvert\det U_j\rvert + \tfrac12\lVert (x_t-\mu_j)U_j\rVert^2
+ \tfrac{D}{2}\log 2\pi ,
$$

and two objectives over the training rows, minimised by one and the same loop of full-batch
Adam steps (`fit_by_gradient`), from one start and for one budget (plain gradient descent
at one step size diverges on the rival, whose rows pull every component with weight one):

* `lse`: the mixture NLL $\frac1N\sum_t -\log\sum_j e^{-e_{tj}}$, whose gradient weights each
  row's pull on component $j$ by its responsibility $r_{tj} = \operatorname{softmax}(-e_t)_j$
  (the implicit E-step);
* `independent`: the components' NLLs summed, $\frac1N\sum_t \sum_j e_{tj}$: the same model and
  energies without the normalisation over components, so that every row pulls every component
  with weight one and no component cedes a row to another (no responsibility, no competition).

EM's reference is scikit-learn's `GaussianMixture` run from the same start
(`em_reference`). Every fit is scored by the same function: the mean log-likelihood per row of
held-out rows under the fitted mixture (`implicit_em.report.experiments._mixtures.mean_log_likelihood`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from sklearn.mixture import GaussianMixture
from torch import Tensor

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.parameters import Mixture
from implicit_em.report.experiments import _mixtures as mx

__all__ = [
    "OBJECTIVES",
    "em_reference",
    "energies",
    "fit_by_gradient",
    "heldout_comparison",
    "split",
    "true_start",
]

OBJECTIVES = ("lse", "independent")
"""The objectives `fit_by_gradient` minimises: the mixture NLL and its rival without the
normalisation over components."""

FULL = covariance_model("full")

WINDOW = 25
"""The steps over which `fit_by_gradient` reads a plateau of its objective."""


def split(data: mx.Dataset, seed: int, test_share: float) -> tuple[Tensor, Tensor]:
    """The rows of `data` split at random (drawn with `seed`) into training and held-out rows,
    `test_share` of them held out."""
    if not 0.0 < test_share < 1.0:
        raise ValueError(f"test_share must lie in (0, 1), got {test_share}")
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(data.x), generator=generator)
    held = round(test_share * len(data.x))
    return data.x[order[held:]], data.x[order[:held]]


def energies(x: Tensor, logits: Tensor, means: Tensor, log_diag: Tensor, upper: Tensor) -> Tensor:
    r"""$e_{tj}$ `[N, K]` for rows `x[N, D]`, `logits[K]`, `means[K, D]`, the logarithm of
    $U_j$'s diagonal `log_diag[K, D]` and its strict upper part `upper[K, D, D]` (its lower
    part is ignored)."""
    d = x.shape[1]
    u = torch.triu(upper, diagonal=1) + torch.diag_embed(log_diag.exp())
    z = torch.einsum("nd,kde->nke", x, u) - torch.einsum("kd,kde->ke", means, u)[None]
    log_pi = torch.log_softmax(logits, dim=0)
    return -log_pi - log_diag.sum(1) + 0.5 * (z * z).sum(-1) + 0.5 * d * math.log(2 * math.pi)


def _objective(name: str, e: Tensor) -> Tensor:
    if name == "lse":
        return -torch.logsumexp(-e, dim=1).mean()
    if name == "independent":
        return e.sum(dim=1).mean()
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {name!r}")


def fit_by_gradient(
    objective: str, x: Tensor, start: Mixture, learning_rate: float, steps: int, plateau: float
) -> tuple[Mixture | None, list[float]]:
    """Full-batch Adam steps (step `learning_rate`) on `objective` over the rows `x` from
    `start`, at most `steps` of them, stopping once the objective fell by less than `plateau`
    over the last `WINDOW` steps. Returns the fitted mixture (None when the fit left the finite
    parameters: a component collapsed) and the objective at every step taken."""
    u = start.precisions_cholesky
    params = [
        torch.log(start.weights).clone().requires_grad_(True),
        start.means.clone().requires_grad_(True),
        torch.log(torch.diagonal(u, dim1=-2, dim2=-1)).clone().requires_grad_(True),
        torch.triu(u, diagonal=1).clone().requires_grad_(True),
    ]
    optimizer = torch.optim.Adam(params, lr=learning_rate)
    trace: list[float] = []
    for step in range(steps):
        loss = _objective(objective, energies(x, *params))
        if not bool(torch.isfinite(loss)):
            return None, trace
        trace.append(float(loss.detach()))
        if step >= WINDOW and trace[-1 - WINDOW] - trace[-1] < plateau:
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    logits, means, log_diag, upper = (p.detach() for p in params)
    factor = torch.triu(upper, diagonal=1) + torch.diag_embed(log_diag.exp())
    try:
        fitted = Mixture.from_precisions_cholesky(FULL, torch.softmax(logits, 0), means, factor)
    except (ValueError, torch.linalg.LinAlgError):
        return None, trace
    return fitted, trace


def em_reference(
    x: Tensor, start: Mixture, tolerance: float, max_iter: int, reg_covar: float
) -> tuple[Mixture, bool]:
    """scikit-learn's EM (`GaussianMixture`, full covariances) from `start` on the rows `x`:
    the fitted mixture and whether it converged within `max_iter` iterations."""
    gm = GaussianMixture(
        n_components=start.n_components,
        covariance_type="full",
        tol=tolerance,
        max_iter=max_iter,
        reg_covar=reg_covar,
        weights_init=start.weights.numpy(),
        means_init=start.means.numpy(),
        precisions_init=(start.precisions_cholesky @ start.precisions_cholesky.mT).numpy(),
    ).fit(x.numpy())
    fitted = Mixture.from_covariances(
        FULL,
        torch.tensor(gm.weights_, dtype=mx.DTYPE),
        torch.tensor(gm.means_, dtype=mx.DTYPE),
        torch.tensor(gm.covariances_, dtype=mx.DTYPE),
    )
    return fitted, bool(gm.converged_)


def _heldout(mixture: Mixture | None, test: Tensor) -> float:
    return -math.inf if mixture is None else mx.mean_log_likelihood(mixture, test)


def _one_gaussian(train: Tensor) -> Mixture:
    """The single full-covariance Gaussian fitted to `train` (maximum likelihood)."""
    mean = train.mean(0, keepdim=True)
    covariance = torch.cov(train.T, correction=0)[None]
    return Mixture.from_covariances(FULL, torch.ones(1, dtype=mx.DTYPE), mean, covariance)


def true_start() -> Mixture:
    """The synthetic data's generating mixture (`_mixtures.TRUE_*`)."""
    return Mixture.from_covariances(
        FULL,
        torch.tensor(mx.TRUE_WEIGHTS, dtype=mx.DTYPE),
        torch.tensor(mx.TRUE_MEANS, dtype=mx.DTYPE),
        torch.tensor(mx.TRUE_COVARIANCES, dtype=mx.DTYPE),
    )


def heldout_comparison(
    data: mx.Dataset,
    seed: int,
    config: dict[str, Any],
    objectives: tuple[str, ...] = ("lse",),
    start: Mixture | None = None,
) -> dict[str, Any]:
    """From one start (`start`, or `_mixtures.poor_start` on the training rows drawn with
    `seed`): scikit-learn's EM and gradient fits of `objectives`, each scored on the held-out
    rows of the split drawn with `seed`.

    Returns the held-out mean log-likelihood per row of EM (`em`), of a single Gaussian
    (`one_gaussian`) and of each objective's fit (`gd_<objective>`), each gradient fit's gap to
    EM (`gap_<objective>`, nats per row: positive when it generalises better) and steps taken,
    and whether EM converged.
    """
    train, test = split(data, seed, config["heldout_test_share"])
    if start is None:
        start = mx.poor_start(mx.Dataset(data.name, train, data.labels, data.n_components), seed)
    em, converged = em_reference(
        train, start, config["em_tolerance"], config["em_max_iter"], config["em_reg_covar"]
    )
    out: dict[str, Any] = {
        "em": _heldout(em, test),
        "em_converged": converged,
        "one_gaussian": _heldout(_one_gaussian(train), test),
    }
    for objective in objectives:
        fitted, trace = fit_by_gradient(
            objective,
            train,
            start,
            config["heldout_learning_rate"],
            config["heldout_steps"],
            config["heldout_plateau"],
        )
        out[f"gd_{objective}"] = _heldout(fitted, test)
        out[f"gap_{objective}"] = out[f"gd_{objective}"] - out["em"]
        out[f"steps_{objective}"] = len(trace)
    return out

r"""`gd` and `adam`: one optimizer step per pass on the mean NLL of the core,
`implicit_em.objectives.mixture_nll`, whose gradients every pass sums over its chunks with
respect to the unconstrained parameters of the current mixture (softmax logits, means,
log-diagonal whitening factors).

`GradientRule` / `AdamRule` step those parameters themselves: plain gradient descent, whose
rate depends on the data's units (the rule the claims report's experiments measure).
`ScaledGradientRule` / `ScaledAdamRule`, what `GaussianMixture` runs, step them in each
component's own units, so that one rate serves raw and standardized data. Both stop with one
error line naming the rate when a step diverges, and call a pass `stationary` only when the
gradient is small.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.step_rules.base import AutogradRule
from implicit_em.objectives import mixture_nll

__all__ = ["AdamRule", "GradientRule", "ScaledAdamRule", "ScaledGradientRule"]

MOST_FALL = 1.0
"""How far, in nats per sample, a pass's mean log-likelihood may fall below the best earlier
pass before the fit is said to diverge (a step too long for the data)."""

MOST_LOG_RATIO = 1.0
"""The largest eigenvalue of a scaled step's relative change of a covariance."""


class GradientRule(AutogradRule):
    """Plain gradient descent on the mean NLL over the unconstrained parameters.

    The optimizer's coordinates are the logits $\\log\\pi$, the means and the raw factors.
    A pass whose sums are non-finite, whose parameters come out non-finite or singular, or
    whose mean log-likelihood falls more than `MOST_FALL` nats per sample below the best
    earlier pass raises one `ValueError` line that names the rate. `stationary(tol)`: the
    squared norm of the mean NLL's gradient in the coordinates is below `tol`.
    """

    name = "gd"

    def __init__(self, reg_covar: float, learning_rate: float) -> None:
        super().__init__(reg_covar)
        self.learning_rate = learning_rate
        self._optimizer: torch.optim.Optimizer | None = None
        self._coordinates: dict[str, Tensor] = {}
        self._squared_gradient = math.inf

    def _make_optimizer(self, params: list[Tensor]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.learning_rate)

    def begin(self, mixture: Mixture) -> None:
        self._leaves = {
            "logits": torch.log(mixture.weights).requires_grad_(True),
            "means": mixture.means.clone().requires_grad_(True),
            "raw": mixture.model.raw(mixture.precisions_cholesky).requires_grad_(True),
        }
        super().begin(mixture)

    def _nll(self, x: Tensor) -> Tensor:
        leaves = self._leaves
        model = self._current().model
        d, log_det = model.raw_energies(x, leaves["means"], leaves["raw"])
        log_prior = torch.log_softmax(leaves["logits"], dim=0)
        return mixture_nll(d, log_prior=log_prior, log_det=log_det, reduction="none")

    def _origin(self) -> dict[str, Tensor]:
        """The optimizer's coordinates of the pass's mixture."""
        return {name: leaf.detach() for name, leaf in self._leaves.items()}

    def _gradients(self, total: Tensor) -> dict[str, Tensor]:
        """The mean NLL's gradients in the optimizer's coordinates, at `_origin`."""
        return {name: self.sums[name] / total for name in self._leaves}

    def _mixture_at(self, coordinates: dict[str, Tensor]) -> Mixture:
        """The mixture at the optimizer's `coordinates`."""
        model = self._current().model
        return Mixture.from_precisions_cholesky(
            model,
            torch.softmax(coordinates["logits"], dim=0),
            coordinates["means"].clone(),
            model.raw_precision_cholesky(coordinates["raw"]),
        )

    def _diverged(self, what: str) -> ValueError:
        return ValueError(
            f"fitter={self.name!r} diverged at learning_rate={self.learning_rate} ({what}); "
            "lower learning_rate"
        )

    def _check(self, total: Tensor) -> None:
        """Raise `_diverged` for non-finite sums."""
        if not all(bool(torch.isfinite(v).all()) for v in self.sums.values()):
            raise self._diverged("a non-finite log-likelihood or gradient")

    def step(self) -> tuple[Mixture, Tensor]:
        current = self._current()
        total = self.sums["count"]
        self._check(total)
        # d(NLL)/d logits_j = N pi_j - N_j: the masses are read off the gradient.
        masses = total * current.weights - self.sums["logits"]
        origin, grads = self._origin(), self._gradients(total)
        self._squared_gradient = float(sum((g * g).sum() for g in grads.values()))
        shapes = {name: value.shape for name, value in origin.items()}
        if self._optimizer is None or shapes != {k: v.shape for k, v in self._coordinates.items()}:
            self._coordinates = {
                k: torch.zeros_like(v, requires_grad=True) for k, v in origin.items()
            }
            self._optimizer = self._make_optimizer(list(self._coordinates.values()))
        with torch.no_grad():
            for name, value in origin.items():
                self._coordinates[name].copy_(value)
        for name, coordinate in self._coordinates.items():
            coordinate.grad = grads[name]
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        try:
            mixture = self._mixture_at({k: v.detach() for k, v in self._coordinates.items()})
        except (ValueError, RuntimeError):
            raise self._diverged("non-finite or singular parameters") from None
        return mixture, masses

    def stationary(self, tol: float) -> bool:
        return self._squared_gradient < tol


class ScaledGradientRule(GradientRule):
    r"""Gradient descent on the mean NLL, in each component's own units.

    The step measures a change from the pass's mixture in each component's units: with
    $\Sigma_j = L_jL_j^\top$ and $\Sigma_j^\circ = F_jF_j^\top$ its part above `reg_covar`
    ($\approx\Sigma_j - \lambda I$, see `CovarianceModel.unregularized`),

    $$\mu_j' = \mu_j + L_j\delta_j, \qquad
    \Sigma_j' = F_j\exp(A_j)F_j^\top + \lambda I \quad (A_j \text{ symmetric}),$$

    and the optimizer steps $(\text{logits}, \delta, A)$ from $(\log\pi, 0, 0)$ along their
    gradients (by the chain rule from the pass's sums; $L_j^\top\nabla_{\mu_j}$ for
    $\delta_j$). A plain step of rate $\eta$ thus moves a mean by
    $-\eta\,\Sigma_j\nabla_{\mu_j} = \eta\sum_t r_{tj}(x_t - \mu_j)/N$, in the data's units
    whatever their scale, and changes a covariance relatively; every covariance keeps
    `reg_covar` added, as EM's does. It is not EM: EM moves a mean by
    $\sum_t r_{tj}(x_t - \mu_j)/N_j$, $N/N_j$ times as far.

    Every eigenvalue of a step's $A_j$ is clipped to $\pm$`MOST_LOG_RATIO` (a covariance
    changes by at most a factor $e$ along any axis per step): a trust region that only a
    start far from the data's scale reaches, such as the covariance $\lambda I$ of a
    one-point start. `stationary(tol)` reads the gradients in these units: the first-order
    gain of a unit step. A pass whose mean log-likelihood falls more than `MOST_FALL` nats per
    sample below the best earlier pass has diverged too.
    """

    def __init__(self, reg_covar: float, learning_rate: float) -> None:
        super().__init__(reg_covar, learning_rate)
        self._best = -math.inf

    def begin(self, mixture: Mixture) -> None:
        super().begin(mixture)
        self._free = mixture.model.unregularized(mixture.covariances, self.reg_covar)

    def _check(self, total: Tensor) -> None:
        """Also raise `_diverged` when the mean log-likelihood falls more than `MOST_FALL`
        below the best earlier pass."""
        super()._check(total)
        mean_log_likelihood = float(self.sums["log_likelihood"] / total)
        if mean_log_likelihood < self._best - MOST_FALL:
            raise self._diverged(
                f"the mean log-likelihood fell from {self._best:.6g} to {mean_log_likelihood:.6g}"
            )
        self._best = max(self._best, mean_log_likelihood)

    def _moved(self, delta: Tensor, log_ratio: Tensor) -> tuple[Tensor, Tensor]:
        """The means and covariances at the local change `(delta, log_ratio)`."""
        current = self._current()
        model = current.model
        means = current.means + model.offset_in_units(current.precisions_cholesky, delta)
        return means, model.regularized(model.scaled(self._free, log_ratio), self.reg_covar)

    def _origin(self) -> dict[str, Tensor]:
        current = self._current()
        return {
            "logits": torch.log(current.weights),
            "delta": torch.zeros_like(current.means),
            "log_ratio": current.model.zero_log_ratio(current.covariances, current.means),
        }

    def _gradients(self, total: Tensor) -> dict[str, Tensor]:
        model = self._current().model
        origin = self._origin()
        with torch.enable_grad():
            delta = origin["delta"].requires_grad_(True)
            log_ratio = origin["log_ratio"].requires_grad_(True)
            means, cov = self._moved(delta, log_ratio)
            raw = model.raw(model.precision_cholesky(cov))
            grads = torch.autograd.grad(
                (means, raw),
                (delta, log_ratio),
                (self.sums["means"] / total, self.sums["raw"] / total),
            )
        return {"logits": self.sums["logits"] / total, "delta": grads[0], "log_ratio": grads[1]}

    def _mixture_at(self, coordinates: dict[str, Tensor]) -> Mixture:
        model = self._current().model
        log_ratio = model.clip_log_ratio(coordinates["log_ratio"], MOST_LOG_RATIO)
        means, cov = self._moved(coordinates["delta"], log_ratio)
        if not (bool(torch.isfinite(means).all()) and bool(torch.isfinite(cov).all())):
            raise ValueError("non-finite parameters")
        weights = torch.softmax(coordinates["logits"], dim=0)
        return Mixture.from_covariances(model, weights, means, cov)


def _adam(params: list[Tensor], learning_rate: float) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=learning_rate)


class AdamRule(GradientRule):
    """Adam on the mean NLL over the unconstrained parameters (see `GradientRule`)."""

    name = "adam"

    def _make_optimizer(self, params: list[Tensor]) -> torch.optim.Optimizer:
        return _adam(params, self.learning_rate)


class ScaledAdamRule(ScaledGradientRule):
    """Adam on the mean NLL in each component's own units (see `ScaledGradientRule`)."""

    name = "adam"

    def _make_optimizer(self, params: list[Tensor]) -> torch.optim.Optimizer:
        return _adam(params, self.learning_rate)

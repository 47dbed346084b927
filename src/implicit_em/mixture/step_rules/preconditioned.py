r"""`preconditioned`: Xu & Jordan's preconditioned gradient steps, which reproduce EM (see
`implicit_em.mixture.step_rules`)."""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.statistics import empty_components, floored_masses
from implicit_em.mixture.step_rules.base import AutogradRule
from implicit_em.objectives import mixture_nll

__all__ = ["PreconditionedRule"]


class PreconditionedRule(AutogradRule):
    """Xu & Jordan's preconditioned gradient steps over $(\\pi, \\mu, \\Sigma)$."""

    def begin(self, mixture: Mixture) -> None:
        self._leaves = {
            "weights": mixture.weights.detach().clone().requires_grad_(True),
            "means": mixture.means.detach().clone().requires_grad_(True),
            "covariances": mixture.covariances.detach().clone().requires_grad_(True),
        }
        super().begin(mixture)

    def _nll(self, x: Tensor) -> Tensor:
        leaves = self._leaves
        model = self._current().model
        d, log_det = model.natural_energies(x, leaves["means"], leaves["covariances"])
        log_prior = torch.log(leaves["weights"])
        return mixture_nll(d, log_prior=log_prior, log_det=log_det, reduction="none")

    def step(self) -> tuple[Mixture, Tensor]:
        mixture = self._current()
        model = mixture.model
        weights, means, cov = mixture.weights, mixture.means, mixture.covariances
        # The sums are gradients of the NLL, -grad of the log-likelihood.
        g_weights, g_means, g_cov = (
            -self.sums["weights"],
            -self.sums["means"],
            -self.sums["covariances"],
        )
        total = self.sums["count"]
        masses = weights * g_weights
        n = floored_masses(masses)
        new_weights = weights + (weights * g_weights - weights * (weights @ g_weights)) / total
        new_means = means + model.mean_step(cov, g_means, n)
        delta = new_means - means
        empty = empty_components(masses)
        if bool(empty.any()) and model.per_component:
            delta = torch.where(empty[:, None], torch.zeros_like(delta), delta)
            shape = (-1,) + (1,) * (g_cov.dim() - 1)
            g_cov = torch.where(empty.reshape(shape), torch.zeros_like(g_cov), g_cov)
        new_cov = model.covariance_step(cov, g_cov, n, delta, total, self.reg_covar)
        return Mixture.from_covariances(model, new_weights, new_means, new_cov), masses

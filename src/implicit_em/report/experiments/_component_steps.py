r"""Gradient descent with per-component steps $1/N_j$: the diagonal of Xu and Jordan's preconditioner.

Xu and Jordan (1996) show that EM's mean update is a gradient step preconditioned by
$P_j = \Sigma_j / N_j$, with $N_j = \sum_t r_{tj}$:
$\mu_j' = \mu_j + \frac{\Sigma_j}{N_j}\nabla_{\mu_j}\ell$. Keeping only its per-component
scalar part, $1/N_j$, gives gradient descent in which each component takes a step inversely
proportional to its mass:

$$
\theta_j' = \theta_j + \eta\,\frac{1}{N_j}\nabla_{\theta_j}\ell
          = \theta_j - \eta\,\frac{N}{N_j}\nabla_{\theta_j}\Bigl(-\frac{\ell}{N}\Bigr)
$$

for each component's own parameters (its mean and its whitening factor), while the shared
mixing logits keep the scalar step $\eta$ on the mean NLL (their gradient,
$\pi_j - N_j/N$, is already a difference of masses). For the means this is
$\mu_j' = \mu_j + \eta\,\Sigma_j^{-1}(\bar x_j - \mu_j)$ with $\bar x_j$ the
responsibility-weighted mean of the data: the component moves toward EM's target $\bar x_j$ in
the metric $\Sigma_j^{-1}$, where EM moves there in one step. The rule differs from
`implicit_em.mixture.step_rules.GradientRule` only in those per-component step sizes.
"""

from __future__ import annotations

import torch

from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.step_rules import GradientRule

__all__ = ["ComponentStepRule"]

_PER_COMPONENT = ("means", "raw")


class ComponentStepRule(GradientRule):
    """Plain gradient descent whose component j takes the step `learning_rate * N / N_j`."""

    def step(self) -> tuple[Mixture, torch.Tensor]:
        total = self.sums["count"]
        weights = torch.softmax(self._leaves["logits"].detach(), dim=0)
        masses = total * weights - self.sums["logits"]
        scale = total / masses.clamp_min(torch.finfo(masses.dtype).eps * total)
        for name in _PER_COMPONENT:
            grad = self.sums[name]
            self.sums[name] = grad * scale.reshape((-1,) + (1,) * (grad.dim() - 1))
        return super().step()

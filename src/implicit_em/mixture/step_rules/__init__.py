r"""The four step rules of `GaussianMixture`, over one loop.

Each pass over the data calls `StepRule.begin` with the current parameters,
`StepRule.accumulate` on every chunk (it adds *summable* tensors to `StepRule.sums`:
sufficient statistics or gradients, plus the log-likelihood and the sample count, so chunks and
ranks combine by addition), and `StepRule.step` once; only `step` differs in kind.
`accumulate` is `accumulate_prepared` of `prepare`: what `prepare` makes of a chunk (for
`em`, the covariance type's row features about a fixed shift) is the same at every pass, so
a fit may keep it (`implicit_em.mixture.fitting.PreparedChunks`).

One module per rule (`em`, `preconditioned`, `gradient`), the protocol in `base`, and the
registry here: a new rule is a module and a line of `make_step_rule`.

With $\ell(\theta) = \sum_t \log\sum_j \pi_j\mathcal N(x_t\mid\mu_j,\Sigma_j)$ and
$N_j = \sum_t r_{tj}$:

* `em`: the closed-form M-step from the statistics (`statistics`).
* `gd` / `adam`: `implicit_em.objectives.mixture_nll` of the core, over unconstrained
  parameters (softmax logits, means, log-diagonal whitening factors), differentiated by autograd:
  the responsibilities arrive as gradients, $\partial(-\ell)/\partial d_{tj} = r_{tj}$.
  One optimizer step per pass on the mean NLL $-\ell/N$ (the full-data gradient), in the
  raw coordinates (`scaled=False`: plain gradient descent) or in each component's own units
  (`scaled=True`, what `GaussianMixture` runs; see `gradient`).
* `preconditioned`: the same autograd gradient of the core's NLL, now over the natural
    parameters $(\pi, \mu, \Sigma)$, preconditioned as in Xu & Jordan (1996):

    $$
    \pi' = \pi + \tfrac1N(\operatorname{diag}\pi - \pi\pi^\top)\,\nabla_\pi\ell, \qquad
    \mu_j' = \mu_j + \tfrac{\Sigma_j}{N_j}\nabla_{\mu_j}\ell, \qquad
    \Sigma_j' = \Sigma_j + \tfrac2{N_j}\Sigma_j(\nabla_{\Sigma_j}\ell)\Sigma_j
    - \delta_j\delta_j^\top + \lambda I,
    $$

    with $N_j = \pi_j\,\partial\ell/\partial\pi_j$ (read off the gradient) and
    $\delta_j = \mu_j' - \mu_j$. The weight and mean steps are exactly EM's; the covariance
    step is EM's update about the *old* means, and $-\delta_j\delta_j^\top$ (the
    parallel-axis shift to the new means) makes it EM's exactly. Step by step the rule reproduces
    `em` to rounding.
"""

from __future__ import annotations

from torch import Tensor

from implicit_em.mixture.step_rules.base import AutogradRule, StepRule
from implicit_em.mixture.step_rules.em import EMRule
from implicit_em.mixture.step_rules.gradient import (
    AdamRule,
    GradientRule,
    ScaledAdamRule,
    ScaledGradientRule,
)
from implicit_em.mixture.step_rules.preconditioned import PreconditionedRule

__all__ = [
    "DEFAULT_LEARNING_RATES",
    "FITTERS",
    "AdamRule",
    "AutogradRule",
    "EMRule",
    "GradientRule",
    "PreconditionedRule",
    "ScaledAdamRule",
    "ScaledGradientRule",
    "StepRule",
    "make_step_rule",
]

FITTERS = ("em", "gd", "adam", "preconditioned")
DEFAULT_LEARNING_RATES = {"gd": 1.0, "adam": 0.1}
_GRADIENT_RULES = {
    ("gd", False): GradientRule,
    ("adam", False): AdamRule,
    ("gd", True): ScaledGradientRule,
    ("adam", True): ScaledAdamRule,
}


def make_step_rule(
    fitter: str,
    reg_covar: float,
    learning_rate: float | None,
    shift: Tensor | None = None,
    *,
    scaled: bool = False,
) -> StepRule:
    """The `StepRule` named `fitter` (`ValueError` for an unknown name); `shift` fixes the
    shift of `em`'s statistics (see `EMRule`); `scaled` takes `gd` and `adam`'s steps in each
    component's units (`ScaledGradientRule`) instead of the raw coordinates."""
    if fitter == "em":
        return EMRule(reg_covar, shift)
    if fitter == "preconditioned":
        return PreconditionedRule(reg_covar)
    if fitter in DEFAULT_LEARNING_RATES:
        lr = DEFAULT_LEARNING_RATES[fitter] if learning_rate is None else learning_rate
        return _GRADIENT_RULES[fitter, scaled](reg_covar, lr)
    raise ValueError(f"fitter must be one of {list(FITTERS)}, got {fitter!r}")

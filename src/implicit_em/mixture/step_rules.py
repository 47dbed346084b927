r"""The four step rules of `GaussianMixture`, over one loop.

Each pass over the data calls `StepRule.begin` with the current parameters,
`StepRule.accumulate` on every chunk (it adds *summable* tensors to `StepRule.sums`:
sufficient statistics or gradients, plus the log-likelihood and the sample count, so chunks and
ranks combine by addition), and `StepRule.step` once; only `step` differs in kind.
`accumulate` is `accumulate_prepared` of `prepare`: what `prepare` makes of a chunk (for
`em`, the covariance type's row features about a fixed shift) is the same at every pass, so
a fit may keep it (`implicit_em.mixture.fitting.PreparedChunks`).

With $\ell(\theta) = \sum_t \log\sum_j \pi_j\mathcal N(x_t\mid\mu_j,\Sigma_j)$ and
$N_j = \sum_t r_{tj}$:

* `em`: the closed-form M-step from the statistics (`statistics`).
* `gd` / `adam`: `implicit_em.objectives.mixture_nll` of the core, over unconstrained
  parameters (softmax logits, means, log-diagonal whitening factors), differentiated by autograd:
  the responsibilities arrive as gradients, $\partial(-\ell)/\partial d_{tj} = r_{tj}$.
  One optimizer step per pass on the mean NLL $-\ell/N$ (the full-data gradient).
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

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from implicit_em.mixture.parameters import EStep, Mixture, row_features
from implicit_em.mixture.statistics import (
    e_step,
    empty_components,
    m_step,
    reference,
    zero_statistics,
)
from implicit_em.mixture.workspace import Workspace
from implicit_em.objectives import mixture_nll

__all__ = [
    "FITTERS",
    "AdamRule",
    "EMRule",
    "GradientRule",
    "PreconditionedRule",
    "StepRule",
    "make_step_rule",
]

_LOG_2PI = float(torch.log(torch.tensor(2.0 * torch.pi, dtype=torch.float64)))


class StepRule(ABC):
    """A parameter update; `sums` holds what a pass accumulates (summable tensors)."""

    def __init__(self, reg_covar: float) -> None:
        self.reg_covar = reg_covar
        self.sums: dict[str, Tensor] = {}
        self.mixture: Mixture | None = None
        self.workspace = Workspace()

    def begin(self, mixture: Mixture) -> None:
        """Start a pass at `mixture`: clear the sums."""
        self.mixture = mixture
        self.sums = {
            "log_likelihood": mixture.means.new_zeros(()),
            "count": mixture.means.new_zeros(()),
        }

    def prepare(self, x: Tensor, workspace: Workspace | None = None) -> Tensor:
        """What `accumulate_prepared` reads of a chunk `x[B, D]`, the same at every pass
        (`x` itself unless a rule says otherwise); in `workspace`, or fresh if None."""
        return x

    def rows(self, prepared: Tensor) -> tuple[Tensor, Tensor | None]:
        """The chunk's rows inside `prepared`, and the offset to add to them (or None)."""
        return prepared, None

    @abstractmethod
    def accumulate_prepared(self, prepared: Tensor) -> Tensor:
        """Add a prepared chunk to `sums`; return its per-sample log-likelihood `[B]`."""

    def accumulate(self, x: Tensor) -> Tensor:
        """Add a chunk `x[B, D]` to `sums`; return its per-sample log-likelihood `[B]`."""
        return self.accumulate_prepared(self.prepare(x, self.workspace))

    @abstractmethod
    def step(self) -> tuple[Mixture, Tensor]:
        """The new parameters from the (all-reduced) sums, and the masses $N_j$ `[K]`."""

    def _current(self) -> Mixture:
        if self.mixture is None:
            raise RuntimeError("begin() must be called before accumulate() or step()")
        return self.mixture


class EMRule(StepRule):
    """Classical EM: E-step statistics per chunk, closed-form M-step per pass.

    The statistics are taken about a shift $s$: `shift` if given (fixed for every pass, so
    the prepared chunks stay valid), else each pass's mixture mean.
    """

    def __init__(self, reg_covar: float, shift: Tensor | None = None) -> None:
        super().__init__(reg_covar)
        self.shift = shift

    def begin(self, mixture: Mixture) -> None:
        super().begin(mixture)
        shift = mixture.shift if self.shift is None else self.shift
        self._constants = EStep.of(mixture, shift.to(mixture.means))
        self._ref = reference(mixture, self._constants.shift)
        self.sums = zero_statistics(
            mixture.model, mixture.n_components, mixture.n_features, mixture.means
        )

    def prepare(self, x: Tensor, workspace: Workspace | None = None) -> Tensor:
        self._current()
        return row_features(x, self._constants, workspace)

    def rows(self, prepared: Tensor) -> tuple[Tensor, Tensor | None]:
        return self._constants.model.data(prepared), self._constants.shift

    def accumulate_prepared(self, prepared: Tensor) -> Tensor:
        self._current()
        return e_step(self.sums, prepared, self._constants, self.workspace)

    def step(self) -> tuple[Mixture, Tensor]:
        current = self._current()
        mixture = m_step(
            self.sums,
            current.model,
            self._constants.shift,
            self._ref,
            self.reg_covar,
            current.precisions_cholesky,
        )
        return mixture, self.sums["n"]


class _AutogradRule(StepRule):
    """Shared pass of the gradient rules: sum the core NLL's gradients over chunks."""

    _leaves: dict[str, Tensor]

    @abstractmethod
    def _nll(self, x: Tensor) -> Tensor:
        """Per-sample NLL `[B]` of the core (without the $\\tfrac D2\\log 2\\pi$)."""

    def begin(self, mixture: Mixture) -> None:
        super().begin(mixture)
        for name, leaf in self._leaves.items():
            self.sums[name] = torch.zeros_like(leaf)

    def accumulate_prepared(self, prepared: Tensor) -> Tensor:
        x = prepared
        with torch.enable_grad():
            nll = self._nll(x)
            grads = torch.autograd.grad(nll.sum(), list(self._leaves.values()))
        for name, grad in zip(self._leaves, grads, strict=True):
            self.sums[name] += grad
        log_p = -nll.detach() - 0.5 * x.shape[1] * _LOG_2PI
        self.sums["log_likelihood"] += log_p.sum()
        self.sums["count"] += x.shape[0]
        return log_p


class PreconditionedRule(_AutogradRule):
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
        n = masses + 10 * torch.finfo(masses.dtype).eps
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


class GradientRule(_AutogradRule):
    """Plain gradient descent on the mean NLL over unconstrained parameters."""

    def __init__(self, reg_covar: float, learning_rate: float) -> None:
        super().__init__(reg_covar)
        self.learning_rate = learning_rate
        self._optimizer: torch.optim.Optimizer | None = None

    def _make_optimizer(self, params: list[Tensor]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.learning_rate)

    def begin(self, mixture: Mixture) -> None:
        values = {
            "logits": torch.log(mixture.weights),
            "means": mixture.means,
            "raw": mixture.model.raw(mixture.precisions_cholesky),
        }
        if self._optimizer is None or self._leaves["means"].shape != mixture.means.shape:
            self._leaves = {k: v.detach().clone().requires_grad_(True) for k, v in values.items()}
            self._optimizer = self._make_optimizer(list(self._leaves.values()))
        else:
            with torch.no_grad():
                for name, value in values.items():
                    self._leaves[name].copy_(value)
        super().begin(mixture)

    def _nll(self, x: Tensor) -> Tensor:
        leaves = self._leaves
        model = self._current().model
        d, log_det = model.raw_energies(x, leaves["means"], leaves["raw"])
        log_prior = torch.log_softmax(leaves["logits"], dim=0)
        return mixture_nll(d, log_prior=log_prior, log_det=log_det, reduction="none")

    def step(self) -> tuple[Mixture, Tensor]:
        model = self._current().model
        total = self.sums["count"]
        weights = torch.softmax(self._leaves["logits"].detach(), dim=0)
        # d(NLL)/d logits_j = N pi_j - N_j: the masses are read off the gradient.
        masses = total * weights - self.sums["logits"]
        optimizer = self._optimizer
        if optimizer is None:
            raise RuntimeError("begin() must be called before step()")
        for name, leaf in self._leaves.items():
            leaf.grad = self.sums[name] / total
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        leaves = {k: v.detach() for k, v in self._leaves.items()}
        try:
            mixture = Mixture.from_precisions_cholesky(
                model,
                torch.softmax(leaves["logits"], dim=0),
                leaves["means"].clone(),
                model.raw_precision_cholesky(leaves["raw"]),
            )
        except ValueError as err:
            raise ValueError(
                f"the {type(self).__name__} step at learning_rate={self.learning_rate} diverged "
                f"({err}); lower learning_rate"
            ) from err
        return mixture, masses


class AdamRule(GradientRule):
    """Adam on the mean NLL over unconstrained parameters."""

    def _make_optimizer(self, params: list[Tensor]) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=self.learning_rate)


FITTERS = ("em", "gd", "adam", "preconditioned")
DEFAULT_LEARNING_RATES = {"gd": 0.5, "adam": 0.05}


def make_step_rule(
    fitter: str, reg_covar: float, learning_rate: float | None, shift: Tensor | None = None
) -> StepRule:
    """The `StepRule` named `fitter` (`ValueError` for an unknown name); `shift` fixes the
    shift of `em`'s statistics (see `EMRule`)."""
    if fitter == "em":
        return EMRule(reg_covar, shift)
    if fitter == "preconditioned":
        return PreconditionedRule(reg_covar)
    if fitter in DEFAULT_LEARNING_RATES:
        lr = DEFAULT_LEARNING_RATES[fitter] if learning_rate is None else learning_rate
        rule = GradientRule if fitter == "gd" else AdamRule
        return rule(reg_covar, lr)
    raise ValueError(f"fitter must be one of {list(FITTERS)}, got {fitter!r}")

"""The protocol of a step rule (`StepRule`) and the pass the autograd rules share
(`AutogradRule`); see `implicit_em.mixture.step_rules`."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.workspace import Workspace

__all__ = ["AutogradRule", "StepRule"]

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

    def stationary(self, tol: float) -> bool:
        """Whether the last `step` started where the rule has nothing left to gain (beyond
        the likelihood's change, which the loop compares with `tol`): always, for EM."""
        return True

    def _current(self) -> Mixture:
        if self.mixture is None:
            raise RuntimeError("begin() must be called before accumulate() or step()")
        return self.mixture


class AutogradRule(StepRule):
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

"""`em`: classical EM, E-step statistics per chunk and the closed-form M-step per pass."""

from __future__ import annotations

from torch import Tensor

from implicit_em.mixture.parameters import EStep, Mixture, row_features
from implicit_em.mixture.statistics import e_step, m_step, reference, zero_statistics
from implicit_em.mixture.step_rules.base import StepRule
from implicit_em.mixture.workspace import Workspace

__all__ = ["EMRule"]


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

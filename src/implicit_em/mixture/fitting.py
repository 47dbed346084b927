r"""The fitting loop of `GaussianMixture`: passes, steps, convergence, the best of `n_init`.

The starting mixture comes from `start`.

One template loop (initialize, pass over the data, step, re-seed, convergence on the *mean*
log-likelihood) owns the fit; the four `fitter` values differ only in the step rule of
`step_rules`, and the four `covariance_type` values only in their `covariance` module.
Passes stream over chunks and accumulate sums, so memory is $O(B\,K + K\,D^2)$ and
`torch.distributed` ranks combine with one all-reduce.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from sklearn.exceptions import ConvergenceWarning
from torch import Tensor

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.distributed import all_reduce_sums
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.reseed import WorstSamples, reseed_empty
from implicit_em.mixture.step_rules import StepRule, make_step_rule

__all__ = [
    "CACHE_BYTES",
    "Callback",
    "Loop",
    "PassByPass",
    "PreparedChunks",
    "Run",
    "default_chunk_rows",
]

Callback = Callable[[int, float], None]

CACHE_BYTES = 2**29
"""The default `cache_bytes`: 512 MiB of prepared chunks kept across passes."""

_CHUNK_NUMBERS = 2**21
_CHUNK_ROWS = (1024, 32768)


def default_chunk_rows(covariance_type: str, n_components: int, n_features: int) -> int:
    r"""Rows per internal chunk when `batch_size` is None.

    A chunk holds $B\,(w + K)$ numbers (`w` the type's features per row: $KD$
    whitened residuals for `full`, $[y, y^2]$ for `diag`); about $2^{21}$ of
    them (8 MiB in float32, split between the threads) keep its E-step and M-step near the
    cache, clipped to 1,024..32,768 rows. On a 2-core Xeon (AVX-512, 2 MiB of L2 per core),
    one thread, a float32 `full` pass over (100k, 32, 16) took 82-87 ms at 4,096 rows
    against 96-97 ms at 1,985 ($2^{20}$ numbers) and 110 ms at 1,024; `diag` was the same
    at 13,107 and 26,214 rows (13-14 ms). Longer chunks also mean fewer parallel regions per
    pass, which a thread that loses its core stalls one by one.
    """
    width = covariance_model(covariance_type).row_width(n_components, n_features)
    rows = _CHUNK_NUMBERS // (width + n_components)
    return min(max(rows, _CHUNK_ROWS[0]), _CHUNK_ROWS[1])


# ---------------------------------------------------------------------------------------------
# The template loop
# ---------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One initialization's fit: its mixture, last mean log-likelihood and history."""

    mixture: Mixture
    lower_bound: float = -math.inf
    converged: bool = False
    n_iter: int = 0
    history: dict[str, list[float]] = field(
        default_factory=lambda: {"log_likelihood": [], "n_reseeded": []}
    )


class PreparedChunks:
    """The chunks of every pass as a step rule prepares them, kept across passes when all of
    them fit in `max_bytes`.

    What a rule prepares of a chunk is the same at every pass (for `em`, the covariance
    type's row features about the fit's fixed shift: $[y, y^2]$ for `diag`, $[y, 1]$ for
    `full`), so kept chunks spare every later pass the conversion of the input and the
    features' elementwise work. `chunks()` iterates the data once; `n_rows`, the number of
    rows of in-memory data, decides at the first chunk whether the whole pass fits; a stream
    of batches (`n_rows` None) is prepared anew at every pass, into the rule's workspace.
    """

    def __init__(
        self, chunks: Callable[[], Iterable[Tensor]], n_rows: int | None, max_bytes: int
    ) -> None:
        self._chunks, self._n_rows, self._max_bytes = chunks, n_rows, max_bytes
        self._kept: list[Tensor] | None = None
        self.kept = False
        """Whether the chunk just yielded is kept (it stays valid, unchanged, after the pass:
        a reference to it costs no memory); else it may be overwritten by the next."""

    def __call__(self, rule: StepRule) -> Iterator[Tensor]:
        """One pass of prepared chunks for `rule`."""
        if self._kept is not None:
            self.kept = True
            yield from self._kept
            return
        kept: list[Tensor] | None = [] if self._n_rows is not None else None
        for x in self._chunks():
            if kept is None:
                self.kept = False
                yield rule.prepare(x, rule.workspace)
                continue
            prepared = rule.prepare(x)
            row_bytes = prepared[:1].numel() * prepared.element_size()
            if not kept and row_bytes * self._n_rows > self._max_bytes:
                kept = None
            else:
                kept.append(prepared)
            self.kept = kept is not None
            yield prepared
        self._kept = kept


@dataclass(frozen=True)
class Loop:
    """The passes of one fit: `max_iter` steps of the rule `fitter`, stopped when the mean
    log-likelihood changes by less than `tol` and the rule is `stationary` (a gradient rule
    whose steps have merely become short has not converged)."""

    fitter: str
    reg_covar: float
    learning_rate: float | None
    max_iter: int
    tol: float
    verbose: int = 0
    verbose_interval: int = 10
    cache_bytes: int = CACHE_BYTES

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Loop:
        """The loop an estimator's `get_params()` describe."""
        return cls(**{f.name: params[f.name] for f in fields(cls)})

    def rule(self, shift: Tensor | None = None) -> StepRule:
        """A fresh step rule (`em`'s statistics about `shift`, if given; `gd` and `adam`
        in each component's units)."""
        return make_step_rule(
            self.fitter, float(self.reg_covar), self.learning_rate, shift, scaled=True
        )

    def one_pass(
        self, rule: StepRule, mixture: Mixture, chunks: PreparedChunks
    ) -> tuple[Mixture, float, int]:
        """One pass: accumulate every chunk, all-reduce, step, re-seed. Returns the new
        mixture, the pass's mean log-likelihood and the number of re-seeded components."""
        rule.begin(mixture)
        worst = WorstSamples(mixture.n_components, mixture.n_features, mixture.means)
        for prepared in chunks(rule):
            log_p = rule.accumulate_prepared(prepared)
            rows, offset = rule.rows(prepared)
            worst.add(rows, log_p, offset, kept=chunks.kept)
        return self.finish_pass(rule, worst)

    @staticmethod
    def finish_pass(rule: StepRule, worst: WorstSamples) -> tuple[Mixture, float, int]:
        """All-reduce the rule's sums, step and re-seed (see `one_pass`)."""
        sums = all_reduce_sums(rule.sums)
        mean_log_likelihood = float(sums["log_likelihood"] / sums["count"])
        stepped, masses = rule.step()
        mixture, n_reseeded = reseed_empty(stepped, masses, worst, sums["count"])
        return mixture, mean_log_likelihood, n_reseeded

    def iterate(
        self,
        mixture: Mixture,
        chunks: PreparedChunks,
        callback: Callback | None,
        lower_bound: float,
        shift: Tensor,
    ) -> Run:
        """Up to `max_iter` passes from `mixture`, `em`'s statistics about `shift`."""
        run = Run(mixture, lower_bound=lower_bound)
        rule = self.rule(shift)
        with torch.no_grad():
            for n_iter in range(1, self.max_iter + 1):
                previous = run.lower_bound
                run.mixture, run.lower_bound, n_reseeded = self.one_pass(rule, run.mixture, chunks)
                run.n_iter = n_iter
                run.history["log_likelihood"].append(run.lower_bound)
                run.history["n_reseeded"].append(n_reseeded)
                change = run.lower_bound - previous
                if self.verbose and n_iter % self.verbose_interval == 0:
                    print(
                        f"Iteration {n_iter}: log-likelihood {run.lower_bound:.6f}, "
                        f"change {change:.3e}, re-seeded {n_reseeded}"
                    )
                if callback is not None:
                    callback(n_iter, run.lower_bound)
                if abs(change) < self.tol and rule.stationary(self.tol):
                    run.converged = True
                    break
        return run

    def best_run(
        self,
        starts: Iterator[tuple[Mixture, float]],
        batches: Callable[[], Iterable[Tensor]],
        n_rows: int | None,
        callback: Callback | None,
    ) -> Run:
        """The run with the highest final lower bound over `starts` (each a mixture and the
        lower bound it starts from); `batches()` iterates the data once, `n_rows` rows if
        known. scikit-learn's `ConvergenceWarning` when that run did not converge.

        Every run takes `em`'s statistics about one shift, the first start's mixture mean
        (any fixed point near the data removes its offset; at every EM step after the first,
        the mixture mean is the data mean), so the prepared chunks serve every pass of every
        run.
        """
        chunks = PreparedChunks(batches, n_rows, self.cache_bytes)
        best: Run | None = None
        shift: Tensor | None = None
        for mixture, lower_bound in starts:
            shift = mixture.shift if shift is None else shift
            run = self.iterate(mixture, chunks, callback, lower_bound, shift)
            if best is None or run.lower_bound > best.lower_bound:
                best = run
        if best is None:
            raise ValueError("a fit needs at least one start")
        if not best.converged and self.max_iter > 0:
            warnings.warn(
                "Best performing initialization did not converge. Try different init "
                "parameters, or increase max_iter, tol, or check for degenerate data.",
                ConvergenceWarning,
                stacklevel=5,
            )
        return best


class PassByPass:
    """The passes of `partial_fit`: one step rule across them (an optimizer keeps its state),
    and the pass under way, which every call adds its rows to until one closes it."""

    def __init__(self, loop: Loop) -> None:
        self._tol = loop.tol
        self._rule = loop.rule()
        self._worst: WorstSamples | None = None

    def add(self, mixture: Mixture, chunks: Iterable[Tensor]) -> None:
        """Add `chunks` to the pass under way (opened at `mixture` if none is)."""
        if self._worst is None:
            self._rule.begin(mixture)
            self._worst = WorstSamples(mixture.n_components, mixture.n_features, mixture.means)
        for chunk in chunks:
            self._worst.add(chunk, self._rule.accumulate(chunk))

    def close(self, previous: float) -> tuple[Mixture, float, int, bool]:
        """Step: the new mixture, the pass's mean log-likelihood, the number of re-seeded
        components, and whether the pass converged from the `previous` log-likelihood (as
        `Loop.iterate` judges it)."""
        if self._worst is None:
            raise RuntimeError("add() must open a pass before close()")
        mixture, log_likelihood, n_reseeded = Loop.finish_pass(self._rule, self._worst)
        self._worst = None
        converged = abs(log_likelihood - previous) < self._tol and self._rule.stationary(self._tol)
        return mixture, log_likelihood, n_reseeded, converged

r"""Re-seeding of emptied components.

A component is *empty* after a step when its mass $N_j = \sum_t r_{tj}$ falls below a
thousandth of one sample (it explains no sample, and its covariance estimate is only
`reg_covar`). It is then re-seeded at the worst-explained sample of
the pass (the lowest $\log p(x_t)$, a different sample for each empty component), with the
mass-weighted average covariance of the live components and a weight of one sample,
$1/N$, after which the weights are renormalized. For `tied` only the mean and weight
move. Every re-seeding is counted in the fit history (`history_["n_reseeded"]`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.mixture.distributed import all_gather_rows
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.statistics import empty_components

__all__ = ["WorstSamples", "reseed_empty"]


class WorstSamples:
    """The `capacity` samples with the lowest log-likelihood seen in a pass.

    A chunk whose rows stay valid after the pass (`kept`: the fit's kept chunks) contributes
    a copy of its log-likelihoods and a reference to its rows, and the lowest are found only
    when read: a pass that empties no component, as most do, pays one small copy per chunk.
    Any other chunk contributes its own `capacity` lowest at once (one `topk`). The
    candidates are merged every `_MERGE_EVERY` chunks and when read.
    """

    _MERGE_EVERY = 64

    def __init__(self, capacity: int, n_features: int, like: Tensor) -> None:
        self.capacity = capacity
        self._values = [like.new_full((capacity,), float("inf"))]
        self._points = [like.new_zeros(capacity, n_features)]
        self._deferred: list[tuple[Tensor, Tensor, Tensor | None]] = []

    def add(
        self, x: Tensor, log_p: Tensor, offset: Tensor | None = None, kept: bool = False
    ) -> None:
        """Take a chunk's samples `x[B, D]` (plus `offset` `[D]`, if given) with
        log-likelihoods `log_p[B]`; `kept`: `x` stays valid and unchanged until this pass's
        candidates are read."""
        if kept:
            self._deferred.append((log_p.detach().clone(), x.detach(), offset))
            return
        self._take(x, log_p, offset)

    def _take(self, x: Tensor, log_p: Tensor, offset: Tensor | None) -> None:
        k = min(self.capacity, log_p.shape[0])
        values, lowest = torch.topk(log_p.detach(), k, largest=False, sorted=False)
        self._append(values, x.detach()[lowest], offset)
        if len(self._values) > self._MERGE_EVERY:
            self._merge()

    def _append(self, values: Tensor, points: Tensor, offset: Tensor | None) -> None:
        """Add candidates `values[n]` with their rows `points[n, D]` (plus `offset`)."""
        if offset is not None:
            points = points + offset
        self._values.append(values.to(self._values[0].dtype))
        self._points.append(points.to(self._points[0].dtype))

    def _take_deferred(self) -> None:
        """The lowest of the deferred chunks, found with one `topk` over all of them."""
        deferred, self._deferred = self._deferred, []
        if not deferred:
            return
        values = torch.cat([log_p for log_p, _, _ in deferred])
        k = min(self.capacity, values.shape[0])
        index = torch.topk(values, k, largest=False, sorted=False).indices
        start = 0
        for log_p, x, offset in deferred:
            end = start + log_p.shape[0]
            mine = index[(index >= start) & (index < end)] - start
            if mine.numel():
                self._append(log_p[mine], x[mine], offset)
            start = end

    def _merge(self) -> None:
        self._take_deferred()
        values, points = torch.cat(self._values), torch.cat(self._points)
        order = torch.argsort(values, stable=True)[: self.capacity]
        self._values, self._points = [values[order]], [points[order]]

    @property
    def values(self) -> Tensor:
        """The lowest log-likelihoods, ascending, `[capacity]` (`inf` where unfilled)."""
        self._merge()
        return self._values[0]

    @property
    def points(self) -> Tensor:
        """Their samples, `[capacity, D]`."""
        self._merge()
        return self._points[0]

    def gathered(self) -> tuple[Tensor, Tensor]:
        """Every rank's candidates, worst first."""
        values, points = all_gather_rows(self.values), all_gather_rows(self.points)
        order = torch.argsort(values, stable=True)
        return values[order], points[order]


def reseed_empty(
    mixture: Mixture, masses: Tensor, candidates: WorstSamples, total: Tensor
) -> tuple[Mixture, int]:
    """Re-seed the empty components of `mixture`; return it and how many were re-seeded."""
    empty = empty_components(masses)
    n_empty = int(empty.sum())  # the same on every rank: the masses are all-reduced
    if n_empty == 0 or n_empty == mixture.n_components:
        return mixture, 0
    values, points = candidates.gathered()
    available = torch.isfinite(values)
    if int(available.sum()) < n_empty:
        return mixture, 0
    model = mixture.model
    idx = torch.nonzero(empty).squeeze(1)
    means = mixture.means.clone()
    means[idx] = points[available][:n_empty]
    weights = mixture.weights.clone()
    weights[idx] = 1.0 / total
    weights = weights / weights.sum()
    cov = mixture.covariances.clone()
    if model.per_component:
        live = (~empty).to(cov.dtype) * masses
        shape = (-1,) + (1,) * (cov.dim() - 1)
        average = (live.reshape(shape) * cov).sum(dim=0) / live.sum()
        cov[idx] = average
    return Mixture.from_covariances(model, weights, means, cov), n_empty

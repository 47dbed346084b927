r"""Preallocated buffers for what the sites keep between two flushes.

A measured step keeps, per site, a few small copies (the traced rows of an activation, the
weights that produced it, a gradient) until the next flush. Allocating those copies step after
step, interleaved with the model's own activations, changes the pattern of the training loop's
allocations: the heap grows and is trimmed again, and every page touched anew is a page fault.
A :class:`Slots` gives each site (and each set of shapes it shows) one buffer per kept tensor,
``[capacity, *shape]``, allocated once; the measured step with index ``s`` in the flush window
copies its tensors into row ``s`` with a single ``torch._foreach_copy_``. The values kept are
views of those rows, which stay valid until the window's flush has read them.

Copies are taken under ``no_grad`` and cast to the buffer's dtype, so the sources may require
grad or be half precision. Without a slot (a probe pass, a window longer than a buffer, a site
showing more than ``max_shapes`` sets of shapes, as with varying sequence lengths) the copies
are plain clones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["Slots"]


_FOREACH_COPY = getattr(torch, "_foreach_copy_", None)


def _copy(destinations: list[Tensor], sources: Sequence[Tensor]) -> None:
    if _FOREACH_COPY is not None:
        _FOREACH_COPY(destinations, sources)
        return
    for d, s in zip(destinations, sources, strict=True):
        d.copy_(s)


_MISSING = object()


class _Store:
    """The buffers of one site and one set of shapes: ``[capacity, *shape]`` each, with the
    per-row views precomputed."""

    def __init__(self, specs: Sequence[tuple[tuple, torch.dtype, torch.device]], capacity: int):
        buffers = [torch.empty((capacity, *shape), dtype=d, device=dev) for shape, d, dev in specs]
        self.rows = [[b[s] for b in buffers] for s in range(capacity)]


class Slots:
    """Per-site buffers for the measured steps of one flush window.

    ``cloned`` counts the bytes of the clones handed out (the tracer resets it at each flush).

    Args:
        capacity: rows per buffer (the number of measured steps between two flushes).
        max_bytes: the bytes all buffers may take together; sites beyond keep clones.
        max_shapes: buffers per site and tag; further sets of shapes keep clones.
    """

    def __init__(self, capacity: int, max_bytes: int, max_shapes: int = 4) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_shapes = max_shapes
        self._stores: dict[tuple, _Store | None] = {}
        self._count: dict[tuple, int] = {}
        self.allocated = 0
        self.cloned = 0

    def keep(
        self,
        key: tuple,
        slot: int | None,
        sources: Sequence[Tensor],
        dtypes: tuple[torch.dtype | None, ...] | None = None,
    ) -> list[Tensor]:
        """Copies of ``sources`` (cast to ``dtypes`` where given, a tuple), kept in row ``slot`` of the
        buffers of ``key`` (clones when ``slot`` is None or no buffer can hold them)."""
        store = None
        if slot is not None and slot < self.capacity:
            shapes = (key, dtypes, *[s.shape for s in sources])
            store = self._stores.get(shapes, _MISSING)
            if store is _MISSING:
                types = self._types(sources, dtypes)
                specs = [(t.shape, d, t.device) for t, d in zip(sources, types, strict=True)]
                store = self._store(key, shapes, specs)
        enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            if store is None:
                types = self._types(sources, dtypes)
                clones = [s.to(d, copy=True) for s, d in zip(sources, types, strict=True)]
                self.cloned += sum(c.nbytes for c in clones)
                return clones
            rows = store.rows[slot]
            _copy(rows, sources)
            return list(rows)
        finally:
            torch._C._set_grad_enabled(enabled)

    def destination(
        self,
        key: tuple,
        slot: int | None,
        shape: tuple,
        dtype: torch.dtype,
        device: torch.device,
    ) -> Tensor | None:
        """Row ``slot`` of the buffer of ``key`` for a tensor of this shape, dtype and device,
        to be written later (by a gradient hook, or as the ``out=`` of a product); None when
        there is no slot or no room (the caller then makes a tensor of its own)."""
        if slot is None or slot >= self.capacity:
            return None
        shapes = (key, (dtype,), shape)
        store = self._stores.get(shapes, _MISSING)
        if store is _MISSING:
            store = self._store(key, shapes, [(shape, dtype, device)])
        return None if store is None else store.rows[slot][0]

    @staticmethod
    def _types(
        sources: Sequence[Tensor], dtypes: Sequence[torch.dtype | None] | None
    ) -> list[torch.dtype]:
        if dtypes is None:
            return [s.dtype for s in sources]
        return [s.dtype if d is None else d for s, d in zip(sources, dtypes, strict=True)]

    def _store(
        self, key: tuple, shapes: tuple, specs: list[tuple[tuple, torch.dtype, torch.device]]
    ) -> _Store | None:
        """A new store for ``shapes`` (the key, the dtypes asked for and the sources' shapes),
        or None (remembered) when the site has ``max_shapes`` stores already or the buffers
        would take the total past ``max_bytes``. A store's dtypes and device are those of its
        first sources; later copies are cast to them."""
        n = self._count.get(key, 0)
        size = self.capacity * sum(math.prod(shape) * d.itemsize for shape, d, _ in specs)
        store = None
        if n < self.max_shapes and self.allocated + size <= self.max_bytes:
            store = _Store(specs, self.capacity)
            self._count[key] = n + 1
            self.allocated += size
        self._stores[shapes] = store
        return store

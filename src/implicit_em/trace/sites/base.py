r"""What every site kind declares, and the typed record of what a site keeps.

A *site kind* is one small unit (a file in this package, one line in its registry):

* `functions`: the torch functions (or `hook_point`) it
  recognizes; the capture calls `SiteKind.observe` after each such call, with its result;
* `aliased`: for some of those functions, the argument (position, name) that the capture
  replaces by a private alias before the call, so that a gradient hook on it sees this
  call's gradient alone;
* `observe`: names the site (`Context.name`), keeps copies of the few tensors its
  statistics need in a `Kept` record and asks for gradients (`Context.on_gradient`);
* `confirmed`: whether the backward pass confirmed the site (a router: its gates carried a
  gradient);
* `statistics`: turns a stack of records (every tensor with a leading step axis `S`) into
  sums and maxima (`implicit_em.trace.metrics`), reduced across ranks under DDP;
* `finish`: turns reduced statistics into the metrics of its records; `metrics` lists them,
  `residual_metric` names the one that is the site's identity residual (its record is
  `exact` when that residual is within its `tolerance`),
  and `gradient_metrics` those that exist only once the backward pass reached the site (the
  record lists them in `missing` otherwise);
* `probe_state` / `probe_statistics`: what a probe measurement keeps (tensors of its own,
  not views of the record's: those buffers are reused by the next measured step), and its
  change since the previous one (churn, drift).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from implicit_em.trace.metrics import Stats

__all__ = ["Context", "Kept", "SiteKind", "binder", "consecutive"]


@dataclass(eq=False)
class Kept:
    """What one site kept in one measured pass. Subclasses are dataclasses: their tensor
    fields are stacked over measurements; other fields are options that must agree for two
    records to stack (see `group`). A gradient field is None until its hook has run."""

    def group(self) -> tuple:
        """Records with equal groups stack: same class, options, tensor shapes and dtypes."""
        key: list[Any] = [type(self)]
        for name in _names(type(self)):
            v = getattr(self, name)
            key.append((v.shape, v.dtype, v.device) if isinstance(v, Tensor) else v)
        return tuple(key)

    def tensors(self) -> list[Tensor]:
        """The tensor fields that are set, in field order."""
        return [v for name in _names(type(self)) if isinstance(v := getattr(self, name), Tensor)]

    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.tensors())

    @classmethod
    def stack(cls, records: Sequence[Kept]) -> Kept:
        """One record whose tensors are those of `records` stacked along a new first axis."""
        values = {}
        for name in _names(cls):
            first = getattr(records[0], name)
            if isinstance(first, Tensor) and len(records) == 1:
                values[name] = first.unsqueeze(0)
            elif isinstance(first, Tensor):
                tensors = [getattr(r, name) for r in records]
                stacked = consecutive(tensors)  # kept copies laid out in order: a view
                values[name] = torch.stack(tensors) if stacked is None else stacked
            else:
                values[name] = first
        return cls(**values)


def consecutive(tensors: Sequence[Tensor]) -> Tensor | None:
    """`torch.stack(tensors)` as a view, where the tensors are contiguous, of one shape and
    dtype, and lie one after the other in one storage (else None)."""
    first = tensors[0]
    if not first.is_contiguous():
        return None
    size, base = first.nbytes, first.untyped_storage().data_ptr()
    for i, t in enumerate(tensors):
        if (
            t.shape != first.shape
            or t.dtype != first.dtype
            or t.device != first.device
            or not t.is_contiguous()
            or t.untyped_storage().data_ptr() != base
            or t.data_ptr() != first.data_ptr() + i * size
        ):
            return None
    return first.new_empty(0).set_(
        first.untyped_storage(),
        first.storage_offset(),
        (len(tensors), *first.shape),
        (first.numel(), *first.stride()),
    )


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    """The field names of a `Kept` dataclass."""
    return tuple(f.name for f in fields(cls))


class Context(Protocol):
    """What the capture offers a site kind while it observes a call."""

    max_rows: int
    """Batch rows of an attention site to keep."""
    max_responsibility_rows: int | None
    """Rows of a responsibility site to keep (an evenly strided sample; None: all)."""
    probing: bool
    """True while the tracer's own probe batch runs (under `no_grad`, by design)."""

    def name(self, suffix: str, source: Any = None) -> str | None:
        """The site's name (by the module that produced `source`, else the innermost
        module running), or None when the `sites` patterns leave it out."""

    def add(self, name: str, kind: SiteKind, kept: Kept) -> None:
        """Record the site in this pass."""

    def unmeasured(self, name: str, kind: SiteKind, reason: str) -> None:
        """Record a site present in this pass that cannot be measured, with the reason."""

    def keep(self, t: Tensor, role: str | None = None) -> Tensor:
        """A detached contiguous copy of `t` that later steps cannot change until this
        measured step is reduced to records (contiguous, so that the batched products of the
        flush read it without another copy); its buffer is then reused by a later measured
        step. Copies of one `role` (a label, e.g. the field's name) and shape are laid out
        one after the other, so that stacking them costs no copy."""

    def on_gradient(self, t: Any, fn: Callable[[Tensor], None]) -> None:
        """Call `fn(gradient of t)` if `t` requires grad and the backward pass of this
        measured step reaches it (not after the tracer's `step()`)."""

    def scratch(self, kind: SiteKind) -> dict:
        """A dict private to `kind` for this pass (e.g. tensors to follow)."""


class SiteKind:
    """A kind of site; subclasses set the class attributes and implement the methods."""

    type: ClassVar[str]
    searched: ClassVar[str]
    functions: ClassVar[tuple[Callable, ...]]
    aliased: ClassVar[dict[Callable, tuple[int, str]]] = {}
    metrics: ClassVar[tuple[str, ...]]
    residual_metric: ClassVar[str]
    gradient_metrics: ClassVar[tuple[str, ...]]
    probe_metrics: ClassVar[tuple[str, ...]]

    def observe(self, ctx: Context, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        raise NotImplementedError

    def statistics(self, stacked: Kept) -> Stats:
        raise NotImplementedError

    def finish(self, stats: Stats, dead_fraction: float) -> dict[str, Tensor]:
        raise NotImplementedError

    def confirmed(self, kept: Kept) -> bool:
        """Whether a site observed in the forward pass is one (read when the pass is taken,
        after its backward pass): a kind whose structure shows only in the backward pass (a
        router's gates carry a gradient) says no to a call that only looked like one."""
        return True

    def has_gradient(self, values: dict[str, Any]) -> bool:
        """Whether the gradient reached the site (from its finished metrics)."""
        raise NotImplementedError

    def probe_state(self, kept: Kept) -> dict[str, Tensor]:
        raise NotImplementedError

    def probe_statistics(
        self, now: dict[str, Tensor] | None, previous: dict[str, Tensor] | None
    ) -> Stats:
        """The change since the previous probe measurement (zeros where there is none, or
        the probe did not reach the site: `now` None)."""
        raise NotImplementedError

    def extras(self, values: dict[str, Any], max_components: int) -> dict[str, Any]:
        """Fields of the record beyond the metrics (e.g. `K`, `source`)."""
        return {}


def binder(fn: Callable) -> Callable[[Sequence, dict], dict[str, Any]]:
    """A function binding a call's arguments to `fn`'s parameter names, defaults filled in."""
    params = inspect.signature(fn).parameters
    names = list(params)
    defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}

    def bind(args: Sequence, kwargs: dict) -> dict[str, Any]:
        bound = dict(defaults)
        bound.update(zip(names, args, strict=False))
        bound.update(kwargs)
        return bound

    return bind

r"""The capture of one measured step: which sites ran, named by module path, and what each kept.

While installed (the forward and backward pass of a measured step), a
`TorchFunctionMode` runs every torch function call as it would run untraced and hands the
result of each call that a site kind recognizes (`KINDS`) to that kind. The input a kind
reads a gradient from (`SiteKind.aliased`: the logits of a loss, the values of an attention)
is first replaced by a private alias made in the mode, `t.view_as(t)`: the same values, so
the call computes the same result, but the alias feeds this call alone, so the gradient
that reaches it is this call's alone even where `t` also feeds other losses (a z-loss, a
distillation term, a second head). Global module forward hooks keep the
stack of running module paths and remember which module produced which tensor: a site is named
by the module that produced its input (`lm_head.ce`), else by the innermost running module
(`transformer.h.0.attn`), with `#2`, `#3` for repeats in one pass. The optimizer's step
ends the capture of a training step. Between measured steps, and under
`paused`, nothing is installed.

The copies a site kind keeps (`SiteCapture.keep`) go into buffers lent to the pass in
progress (`KeptBuffers`); once a measured step is reduced to records, `SiteCapture.release`
gives its passes' buffers back for the next measured step to reuse. Nothing may read a
released pass's kept tensors: what outlives a measurement (a probe state) is a copy.

A compiled graph (`torch.compile`) runs neither the mode nor the module hooks, so while the
capture is installed the compiler's stance is `"force_eager"` (`torch.compiler.set_stance`):
compiled models and functions run eagerly during a measured step and compiled between them.

Only public torch APIs are used: `TorchFunctionMode`, `register_module_forward_pre_hook` /
`register_module_forward_hook`, `register_optimizer_step_pre_hook` and
`Tensor.register_hook`.
"""

from __future__ import annotations

import fnmatch
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from implicit_em.trace.sites import KINDS, Kept, SiteKind
from implicit_em.trace.sites.base import consecutive

__all__ = ["KeptBuffers", "Pass", "Site", "SiteCapture"]


@dataclass(eq=False)
class Site:
    """A site of one pass: what its kind kept, or (`kept` None) why it was not measured."""

    name: str
    kind: SiteKind
    kept: Kept | None
    reason: str | None = None


@dataclass(eq=False)
class Pass:
    """What one forward and backward pass (a training step or the probe) captured, and the
    buffers of its kept copies (`lent`)."""

    sites: list[Site] = field(default_factory=list)
    lent: list[tuple[str | None, Tensor]] = field(default_factory=list)
    live: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    origins: dict[int, tuple[weakref.ref, str]] = field(default_factory=dict)
    scratch: dict[int, dict] = field(default_factory=dict)
    stack: list[str] = field(default_factory=list)


_PROVENANCE = (
    Tensor.view,
    Tensor.reshape,
    Tensor.float,
    Tensor.to,
    Tensor.contiguous,
    Tensor.__getitem__,
    Tensor.neg,
    Tensor.__neg__,
    torch.neg,
    Tensor.flatten,
    Tensor.squeeze,
    Tensor.unsqueeze,
    Tensor.transpose,
    Tensor.permute,
    Tensor.clone,
)
"""Functions whose result keeps the name of the module that produced their input."""


class KeptBuffers:
    """The buffers of a capture's kept copies, reused from one measured step to the next.

    `copy` puts a contiguous copy of a CPU tensor into a free buffer of its role, shape and
    dtype (a new one where none is free); `refill` makes the buffers of a reduced measured
    step the free ones, dropping those it did not use. So a measured step like the previous
    one allocates no kept memory (freed, the few MiB of a step's copies would go back to the
    operating system and fault back in at the next), and the buffers held are those of one
    measured step. The free buffers of one role, shape and dtype are consecutive slices of
    one block, handed out in order: the copies of one field of equally shaped sites (the
    queries of every attention layer) then lie next to each other, and `Kept.stack` takes
    them as one view instead of copying them. A copy on another device is a plain clone: the
    CUDA caching allocator already reuses freed blocks, and blocks held between measured
    steps would be taken from training.
    """

    def __init__(self) -> None:
        self.free: dict[tuple, list[Tensor]] = {}

    def copy(self, t: Tensor, role: str | None = None) -> Tensor:
        """A contiguous copy of `t`, detached, in a buffer of `role` (any label: the
        copies of one role and shape are laid out next to each other)."""
        if t.device.type != "cpu":
            return t.detach().clone(memory_format=torch.contiguous_format)
        free = self.free.get((role, t.shape, t.dtype))
        buffer = free.pop() if free else torch.empty(t.shape, dtype=t.dtype)
        return buffer.copy_(t.detach())

    def refill(
        self, buffers: Sequence[tuple[str | None, Tensor]], ranks: Sequence[int] | None = None
    ) -> None:
        """Make `buffers` (`(role, buffer)` pairs in the order they were lent; nothing reads
        them any more) the free ones, to be handed out again in that order; drop the others,
        and those made under `torch.inference_mode` (no copy outside it may write to them).

        `ranks` (default: the lending order) is the order in which the measurement read the
        buffers (stacked site by site): the buffers of one role, shape and dtype become
        consecutive slices of one block in that order, so that a step lending them in the same
        order lays out each stacked field in one view (a field kept in the backward pass is
        lent last layer first, and read first layer first)."""
        ranks = range(len(buffers)) if ranks is None else ranks
        groups: dict[tuple, list[tuple[int, Tensor]]] = {}
        for (role, b), rank in zip(buffers, ranks, strict=True):
            if b.device.type == "cpu" and not b.is_inference():
                groups.setdefault((role, b.shape, b.dtype), []).append((rank, b))
        self.free = {}
        for (role, shape, dtype), group in groups.items():
            lent = [b for _, b in group]
            by_rank = sorted(group, key=lambda pair: pair[0])
            if len(group) > 1 and consecutive([b for _, b in by_rank]) is None:
                block = torch.empty((len(group), *shape), dtype=dtype).unbind(0)
                slot = {rank: i for i, (rank, _) in enumerate(by_rank)}
                lent = [block[slot[rank]] for rank, _ in group]
            self.free[(role, shape, dtype)] = lent[::-1]  # `pop` hands them out in order

    def clear(self) -> None:
        """Drop every free buffer."""
        self.free = {}


class _Mode(TorchFunctionMode):
    def __init__(
        self,
        table: dict[Callable, tuple[Callable, ...]],
        aliased: dict[Callable, tuple[tuple[int, str], ...]],
        alias: Callable[[Tensor], Tensor],
    ) -> None:
        super().__init__()
        self.table = table
        self.aliased = aliased
        self.alias = alias

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        for position, keyword in self.aliased.get(func, ()):
            if position < len(args):
                args = (*args[:position], self.alias(args[position]), *args[position + 1 :])
            elif keyword in kwargs:
                kwargs = {**kwargs, keyword: self.alias(kwargs[keyword])}
        out = func(*args, **kwargs)
        for observe in self.table.get(func, ()):
            observe(func, args, kwargs, out)
        return out


class SiteCapture:
    r"""Runs the site kinds during measured passes (see the module docstring).

    Parameters
    ----------
    model : nn.Module or None
        The model whose module paths name the sites (`None`: the bare site kinds); a
        `DistributedDataParallel` / `DataParallel` wrapper is looked through.
    patterns : sequence of str or None
        Glob patterns (`fnmatch`) of the site names to trace; `None`: all.
    max_rows : int
        Batch rows of each attention site kept for its metrics.
    max_responsibility_rows : int or None, default=None
        Rows of each responsibility site kept for its metrics (every
        $\lceil N/\text{max}\rceil$-th row of a site with more); `None`: all.
    kinds : sequence of SiteKind, default=KINDS
        The site kinds to run (every registered kind by default).
    """

    def __init__(
        self,
        model: nn.Module | None,
        patterns: Sequence[str] | None,
        max_rows: int,
        max_responsibility_rows: int | None = None,
        kinds: Sequence[SiteKind] = KINDS,
    ) -> None:
        wrapped = isinstance(model, nn.DataParallel | nn.parallel.DistributedDataParallel)
        root = model.module if wrapped else model
        self.names = {} if root is None else {id(m): n for n, m in root.named_modules()}
        self.patterns = None if patterns is None else list(patterns)
        self.max_rows = max_rows
        self.max_responsibility_rows = max_responsibility_rows
        self.kinds = tuple(kinds)
        self.seen: set[str] = set()
        self.current = Pass()
        self.buffers = KeptBuffers()
        table: dict[Callable, list[Callable]] = {}
        aliased: dict[Callable, set[tuple[int, str]]] = {}
        for kind in self.kinds:
            for fn in kind.functions:
                table.setdefault(fn, []).append(self._observer(kind))
            for fn, where in kind.aliased.items():
                aliased.setdefault(fn, set()).add(where)
        for fn in _PROVENANCE:
            table.setdefault(fn, []).append(self._provenance)
        self._mode = _Mode(
            {fn: tuple(obs) for fn, obs in table.items()},
            {fn: tuple(sorted(w)) for fn, w in aliased.items()},
            self._alias,
        )
        self._handles: list[Any] = []
        self._optimizer_handle: Any = None
        self._stance: Any = None
        self.suspended = False
        """While True (`paused`) gradient hooks do nothing."""
        self.probing = False
        """True while the tracer's probe batch runs (sites that need a gradient are taken
        without one there)."""
        self.through_optimizer_step = False
        """While False the optimizer's step ends the capture of a training step; True keeps it
        (an optimizer stepping with a closure, as Lightning's, runs the forward and backward
        pass inside its step)."""

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def start(self) -> None:
        """Install the mode and the hooks (from the next torch call on)."""
        if self._handles:
            return
        self._stance = torch.compiler.set_stance("force_eager")
        self._mode.__enter__()
        self._handles = [
            nn.modules.module.register_module_forward_pre_hook(self._enter_module),
            nn.modules.module.register_module_forward_hook(self._exit_module, always_call=True),
        ]
        if self._optimizer_handle is None:
            self._optimizer_handle = register_optimizer_step_pre_hook(self._optimizer_step)

    def _leave(self) -> None:
        """Remove the mode and the module hooks (the optimizer hook stays until `stop`:
        it may be the hook running now)."""
        if not self._handles:
            return
        for h in self._handles:
            h.remove()
        self._handles = []
        self._mode.__exit__(None, None, None)
        stance, self._stance = self._stance, None
        stance.__exit__(None, None, None)

    def stop(self) -> None:
        """Remove everything the capture installed."""
        self._leave()
        if self._optimizer_handle is not None:
            self._optimizer_handle.remove()
            self._optimizer_handle = None

    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The step's forward and backward passes are over: the optimizer runs uncaptured."""
        if not self.through_optimizer_step:
            self._leave()

    def take(self) -> Pass:
        """Stop, and hand over the pass captured so far (its gradient hooks do nothing from
        now on), without the sites their kind does not confirm (`SiteKind.confirmed`); the
        next `start` begins a new one."""
        self.stop()
        done, self.current = self.current, Pass()
        done.sites = [s for s in done.sites if s.kept is None or s.kind.confirmed(s.kept)]
        done.live = False
        done.origins.clear()
        done.scratch.clear()
        return done

    def release(self, passes: Sequence[Pass]) -> None:
        """The `passes` (taken, those of one measured step) are reduced and nothing reads
        their kept tensors any more: their buffers serve the next measured step, and the
        passes are emptied."""
        lent = [pair for p in passes for pair in p.lent]
        self.buffers.refill(lent, _stacking_ranks(passes, lent))
        for p in passes:
            p.sites, p.lent = [], []

    # -- what site kinds call ---------------------------------------------------------------

    def name(self, suffix: str, source: Any = None) -> str | None:
        p = self.current
        origin = _lookup(p.origins, source)
        path = origin if origin is not None else (p.stack[-1] if p.stack else "")
        base = f"{path}.{suffix}" if path and suffix else (path or suffix or "attention")
        count = p.counts.get(base, 0) + 1
        p.counts[base] = count
        name = base if count == 1 else f"{base}#{count}"
        self.seen.add(name)
        if self.patterns is None or any(fnmatch.fnmatchcase(name, pat) for pat in self.patterns):
            return name
        return None

    def add(self, name: str, kind: SiteKind, kept: Kept) -> None:
        self.current.sites.append(Site(name, kind, kept))

    def unmeasured(self, name: str, kind: SiteKind, reason: str) -> None:
        self.current.sites.append(Site(name, kind, None, reason))

    def keep(self, t: Tensor, role: str | None = None) -> Tensor:
        kept = self.buffers.copy(t, role)
        self.current.lent.append((role, kept))
        return kept

    def on_gradient(self, t: Any, fn: Callable[[Tensor], None]) -> None:
        if not (isinstance(t, Tensor) and t.requires_grad):
            return
        p = self.current

        def hook(g: Tensor) -> None:
            if p.live and not self.suspended:
                with torch.no_grad():
                    fn(g.detach())

        t.register_hook(hook)

    def scratch(self, kind: SiteKind) -> dict:
        return self.current.scratch.setdefault(id(kind), {})

    def _alias(self, t: Any) -> Any:
        """A private alias `t.view_as(t)` of a tensor that requires grad (named as `t`);
        anything else unchanged."""
        if not (isinstance(t, Tensor) and t.requires_grad and torch.is_grad_enabled()):
            return t
        alias = t.view_as(t)
        origin = _lookup(self.current.origins, t)
        if origin is not None:
            self.current.origins[id(alias)] = (weakref.ref(alias), origin)
        return alias

    # -- naming -------------------------------------------------------------------------------

    def _observer(self, kind: SiteKind) -> Callable:
        def observe(func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
            kind.observe(self, func, args, kwargs, out)

        return observe

    def _provenance(self, func: Callable, args: Sequence, kwargs: dict, out: Any) -> None:
        origins = self.current.origins
        if origins and args and isinstance(out, Tensor):
            origin = _lookup(origins, args[0])
            if origin is not None:
                origins[id(out)] = (weakref.ref(out), origin)

    def _enter_module(self, module: nn.Module, args: Any) -> None:
        name = self.names.get(id(module))
        if name is not None:
            self.current.stack.append(name)

    def _exit_module(self, module: nn.Module, args: Any, output: Any) -> None:
        name = self.names.get(id(module))
        if name is None:
            return
        p = self.current
        if p.stack and p.stack[-1] == name:
            p.stack.pop()
        if isinstance(output, Tensor) and name:
            p.origins[id(output)] = (weakref.ref(output), name)


def _stacking_ranks(passes: Sequence[Pass], lent: Sequence[tuple[str | None, Tensor]]) -> list[int]:
    """The rank of each lent buffer in the order the measurement reads them: site by site,
    each kept record's tensor fields in order (a field's tensor is a view of its buffer, at
    the same address); buffers no record holds last, in lending order."""
    index: dict[int, int] = {}
    for i, (_, b) in enumerate(lent):
        if b.numel():
            index.setdefault(b.data_ptr(), i)
    order: list[int] = []
    for p in passes:
        for site in p.sites:
            for t in () if site.kept is None else site.kept.tensors():
                i = index.pop(t.data_ptr(), None) if t.numel() else None
                if i is not None:
                    order.append(i)
    placed = set(order)
    order += [i for i in range(len(lent)) if i not in placed]
    ranks = [0] * len(lent)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def _lookup(table: dict[int, tuple[weakref.ref, Any]], t: Any) -> Any:
    """The entry of `table` for tensor `t` (keyed by `id`, checked by a weak reference:
    an id may have been reused by another tensor), or None."""
    if not isinstance(t, Tensor):
        return None
    entry = table.get(id(t))
    if entry is None or entry[0]() is not t:
        return None
    return entry[1]

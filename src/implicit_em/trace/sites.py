r"""Sites: the places in a model where responsibilities can be read, found without patching it.

One uniform abstraction (the TransformerLens hook-point idea) over every kind of site: a *call*
captured during a measured forward pass, named by the module path that produced it, which
receives its gradients through ``Tensor.register_hook`` and keeps copies of the small tensors
its statistics need in the pass's slot buffers (:mod:`implicit_em.trace.slots`), reduced later
in batches of steps (:mod:`implicit_em.trace.batch`). Attention keeps only its first
``max_rows`` batch rows.

Discovery uses PyTorch's own mechanisms: a :class:`~torch.overrides.TorchFunctionMode` sees
``F.cross_entropy``, ``F.nll_loss`` of a ``log_softmax``, ``F.scaled_dot_product_attention``
(weights recomputed from the captured ``q``, ``k`` for the traced rows, so fused kernels need no
change), ``F.multi_head_attention_forward`` (its traced input rows and projection weights kept at
capture, the in-projections and heads computed at the flush; a narrow pass notes a stock
``nn.MultiheadAttention`` in the module's own forward hook instead and captures it when the
model's forward pass ends), the softmax of eager attention (a softmax over the last axis of a
tensor with three or more axes, followed by a matmul with the values) and this package's
:func:`~implicit_em.objectives.mixture_nll` and :func:`~implicit_em.objectives.cross_entropy`
(recognized by their code objects on the stack when they call ``logsumexp`` / ``log_softmax``).
Global module forward hooks keep the stack of module paths and remember which module produced
which tensor.
"""

from __future__ import annotations

import fnmatch
import inspect
import math
import sys
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from implicit_em import objectives
from implicit_em.attention import attention_scores
from implicit_em.core import responsibilities
from implicit_em.trace.slots import Slots

__all__ = [
    "SEARCHED",
    "AttentionCall",
    "CapturedPass",
    "GroupKey",
    "Inputs",
    "Plan",
    "ResponsibilityCall",
    "SiteCapture",
    "SiteKey",
    "attention_weights",
    "untraced",
]

SEARCHED = (
    "torch.nn.functional.cross_entropy",
    "torch.nn.functional.nll_loss of a log_softmax",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward (nn.MultiheadAttention)",
    "softmax over the last axis of a >=3-D tensor (eager attention)",
    "implicit_em.objectives.mixture_nll",
    "implicit_em.objectives.cross_entropy",
)


class _Binder:
    """Binds call arguments to parameter names with defaults filled in: what
    ``inspect.Signature.bind(...).apply_defaults()`` gives for a call that already succeeded,
    at a fraction of its cost."""

    def __init__(self, fn: Callable) -> None:
        params = inspect.signature(fn).parameters
        self.names = list(params)
        self.defaults = {
            n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty
        }

    def __call__(self, args: Sequence, kwargs: dict) -> dict[str, Any]:
        bound = dict(self.defaults)
        bound.update(zip(self.names, args, strict=False))
        bound.update(kwargs)
        return bound


_CE_SIGNATURE = _Binder(F.cross_entropy)
_NLL_SIGNATURE = _Binder(F.nll_loss)
_SDPA_PARAMS = (
    "query",
    "key",
    "value",
    "attn_mask",
    "dropout_p",
    "is_causal",
    "scale",
    "enable_gqa",
)
_MHA_SIGNATURE = _Binder(F.multi_head_attention_forward)


def untraced() -> torch._C.DisableTorchFunction:
    """A context in which the tracer's own tensor work bypasses the site capture."""
    return torch._C.DisableTorchFunction()


def _entry(table: dict[int, tuple], t: Any) -> tuple | None:
    """The entry of ``table`` for tensor ``t`` (keyed by ``id``, a weak reference to the tensor
    first), or None when there is none or the id now belongs to another object."""
    if not isinstance(t, Tensor):
        return None
    entry = table.get(id(t))
    if entry is None or entry[0]() is not t:
        return None
    return entry


def _rows(t: Tensor, dim: int) -> Tensor:
    """Move the component axis ``dim`` last and flatten the rest: ``[N, K]``."""
    return t.movedim(dim, -1).reshape(-1, t.shape[dim])


def _rows1(t: Tensor) -> Tensor:
    """:func:`_rows` of the class axis 1 (a view for ``[N, K]``)."""
    return t if t.dim() == 2 else _rows(t, 1)


Inputs = dict[str, Tensor]
"""The small detached tensors a site's statistics need, by name (see ``prepare``)."""

GroupKey = tuple
"""Calls with equal keys have inputs of equal names, shapes and dtypes: they stack."""


def _signature(inputs: Inputs) -> tuple:
    return tuple([(n, t.shape, t.dtype) for n, t in inputs.items()])


@dataclass(eq=False, slots=True)
class ResponsibilityCall:
    r"""A classification (cross-entropy) or mixture (LSE) site captured in one forward pass.

    ``logits`` (``[N, K]``) give the forward responsibilities :math:`\operatorname{softmax}(z)`.
    A cross-entropy keeps its targets as given, class indices ``labels`` (``[N]``, with
    ``class_weight``, ``ignore_index``) or soft ``target`` (``[N, K]``), and its
    ``smoothing`` and ``reduction``: targets, row weights :math:`w_i` and the per-row factor
    :math:`c_i = u\,w_i / \sum_i w_i` (mean; :math:`u\,w_i` otherwise) of the upstream
    gradient :math:`u` are formed in the batched statistics. This package's objectives give
    ``target``/None and a ``factor`` function of :math:`u` instead (rows weigh 1).

    The gradient hooks keep the gradient of the hooked source (logits, or distances for this
    package's objectives) and of the loss output (``upstream``); the responsibilities read from
    them (:func:`~implicit_em.trace.metrics.read_responsibilities`) are computed later, in
    batches of steps.
    """

    name: str
    kind: str
    logits: Tensor
    sign: float
    layout: Callable[[Tensor], Tensor]
    labels: Tensor | None = None
    target: Tensor | None = None
    class_weight: Tensor | None = None
    ignore_index: int = -100
    smoothing: float = 0.0
    reduction: str = "mean"
    factor: Callable[[Tensor], Tensor] | None = None
    upstream: Tensor | None = None
    grad: Tensor | None = None

    def prepare(self) -> tuple[GroupKey, Inputs]:
        """The inputs of the statistics: ``logits``; for a cross-entropy its ``labels`` (with
        ``class_weight``) or ``target`` and, once gradients arrived, ``grad`` (``[N, K]``) and
        ``upstream``; otherwise ``weight`` (ones), ``target`` (if any), ``grad`` and the row
        factor ``factor`` :math:`c` (``[N]``, zeros without an upstream gradient). The key's
        third entry says how targets and factors are formed (None: given)."""
        x: Inputs = {"logits": self.logits}
        grad = None if self.grad is None else self.layout(self.grad)
        if self.factor is None:
            if self.labels is not None:
                x["labels"] = self.labels
                if self.class_weight is not None:
                    x["class_weight"] = self.class_weight
                form: tuple | None = ("labels", self.ignore_index, self.smoothing, self.reduction)
            else:
                x["target"] = self.target
                form = ("soft", -1, self.smoothing, self.reduction)
            if grad is not None:
                x["grad"] = grad
                if self.upstream is not None:
                    x["upstream"] = self.upstream
            return ("responsibility", self.sign, form, _signature(x)), x
        n = self.logits.shape[0]
        x["weight"] = torch.ones(n, dtype=self.logits.dtype, device=self.logits.device)
        if self.target is not None:
            x["target"] = self.target
        if grad is not None:
            x["grad"] = grad
            x["factor"] = (
                torch.zeros_like(x["weight"])
                if self.upstream is None
                else self.factor(self.upstream).to(self.logits.dtype).expand(n)
            )
        return ("responsibility", self.sign, None, _signature(x)), x

    def assignment(self) -> Tensor:
        """The argmax component of each row (for churn on a probe batch)."""
        return self.logits.argmax(-1)


@dataclass(eq=False, slots=True)
class AttentionCall:
    r"""An attention site: weights :math:`\alpha` ``[R, H, Lq, Lk]`` on the traced rows.

    ``alpha`` is the model's own weight tensor (eager softmax) or is recomputed at the flush
    from ``q``, ``k`` and the mask (fused SDPA) or from the projections kept in ``projection``
    (``nn.MultiheadAttention``: the traced input rows ``x`` ``[L, R, E]``, or ``query``,
    ``key``, ``value``, the in-projection ``in_weight`` (or ``q_weight``, ``k_weight``,
    ``v_weight``) and ``in_bias``, and ``attn_mask``, ``key_padding_mask`` on the traced rows;
    ``heads`` heads; ``rows_first``: the rows, ``output`` and ``g`` are ``[R, L, E]``).
    ``reconstruct`` says how weights and values map to the captured ``output`` (for the
    forward residual of recomputed weights): ``"matmul"`` (:math:`o = \alpha v`) or
    ``"projection"`` (heads merged, then :math:`y = o W_o^\top + b_o` with ``out_weight``,
    ``out_bias``). For ``"projection"`` the output gradient ``g`` is the gradient of :math:`y`
    on the traced rows, ``[Lq, R, E]`` (kept by the site's gradient hook), mapped to the heads
    in the batched statistics, :math:`g_o = (\partial L/\partial y) W_o`.
    """

    name: str
    alpha: Tensor | None = None
    q: Tensor | None = None
    k: Tensor | None = None
    mask: Tensor | None = None
    is_causal: bool = False
    scale: float | None = None
    v: Tensor | None = None
    used: Tensor | None = None
    output: Tensor | None = None
    reconstruct: str | None = None
    projection: dict[str, Tensor] | None = None
    heads: int = 0
    out_weight: Tensor | None = None
    out_bias: Tensor | None = None
    rows: int = 0
    rows_first: bool = False
    g: Tensor | None = None
    grad_alpha: Tensor | None = None
    grad_v: Tensor | None = None

    def weights(self) -> Tensor:
        r"""The weights on the traced rows, recomputed from ``q`` and ``k`` (or from the kept
        projection inputs) if needed (:func:`attention_weights`)."""
        if self.alpha is not None:
            return self.alpha
        with torch.no_grad():
            if self.projection is not None:
                q, k, _, mask = self._heads()
                return attention_weights(q, k, mask, False, self.scale)[0]
            return attention_weights(self.q, self.k, self.mask, self.is_causal, self.scale)

    def values(self) -> Tensor | None:
        if self.projection is not None and self.v is None:
            with torch.no_grad():
                return self._heads()[2][0]
        return self.v

    def _heads(self) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """:func:`projected_heads` of this one call (a leading step axis of 1)."""
        x = {n: t.unsqueeze(0) for n, t in self.projection.items()}
        return projected_heads(lengths_first(x) if self.rows_first else x, self.heads)

    def prepare(self) -> tuple[GroupKey, Inputs]:
        """The inputs of the statistics: the weights (``alpha``; ``q``, ``k`` and a 4-D
        ``mask``; or the ``projection`` inputs), ``v``, ``g``, ``grad_alpha``, ``used``,
        ``grad_v`` and the ``output`` with its projection, as far as they were captured."""
        x: Inputs = {}
        if self.alpha is not None:
            x["alpha"] = self.alpha
        elif self.projection is not None:
            x.update(self.projection)
        else:
            x["q"], x["k"] = self.q, self.k
            if self.mask is not None:
                x["mask"] = self.mask.reshape((1,) * (4 - self.mask.dim()) + self.mask.shape)
        fields = ("v", "g", "grad_alpha", "used", "grad_v", "output", "out_weight", "out_bias")
        for n in fields:
            t = getattr(self, n)
            if t is not None:
                x["g_output" if n == "g" and self.reconstruct == "projection" else n] = t
        recon = self.reconstruct if self.output is not None else None
        key = ("attention", self.is_causal, self.scale, recon, self.heads, self.rows_first)
        return (*key, _signature(x)), x


def attention_weights(
    q: Tensor, k: Tensor, mask: Tensor | None, is_causal: bool, scale: float | None
) -> Tensor:
    r""":math:`\alpha = \operatorname{softmax}(s)` of the scores ``attention_scores(q, k, ...)``
    along the last axis (rows that a mask excludes entirely are zeros; without a mask no row can
    be excluded). Any leading axes are batch axes."""
    s = attention_scores(q, k, mask, is_causal, scale)
    masked = mask is not None or is_causal
    return responsibilities(-s) if masked else torch.softmax(s, dim=-1)


def projected_heads(x: Inputs, heads: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    r"""The heads of ``nn.MultiheadAttention`` from its kept inputs and weights (see
    :class:`AttentionCall`), each with a leading step axis ``S``.

    The in-projections :math:`x W^\top + b` of the traced rows (``x``, or ``query``, ``key``,
    ``value``, ``[S, L, R, E]``) with ``in_weight`` ``[S, 3E, E]`` (or ``q_weight``,
    ``k_weight``, ``v_weight``) and ``in_bias`` ``[S, 3E]`` are computed in the kept dtype, as
    the module computes them, and split into ``heads``: ``q``, ``k``, ``v`` are
    ``[S, R, H, L, E/H]`` (in at least float32); the mask is additive, broadcastable to
    ``[S, R, H, Lq, Lk]`` (boolean masks mark positions left out), or None."""
    bias = x.get("in_bias")
    if "x" in x:
        q, k, v = _linear_steps(x["x"], x["in_weight"], bias).chunk(3, dim=-1)
    else:
        biases = (None,) * 3 if bias is None else bias.chunk(3, dim=-1)
        if "in_weight" in x:
            weights = x["in_weight"].chunk(3, dim=-2)
        else:
            weights = (x["q_weight"], x["k_weight"], x["v_weight"])
        inputs = (x["query"], x["key"], x["value"])
        q, k, v = (_linear_steps(*a) for a in zip(inputs, weights, biases, strict=True))
    dtype = torch.promote_types(q.dtype, torch.float32)

    def split(t: Tensor) -> Tensor:
        s, length, r, e = t.shape
        return t.to(dtype).reshape(s, length, r, heads, e // heads).permute(0, 2, 3, 1, 4)

    q, k, v = split(q), split(k), split(v)
    s, lq, lk = q.shape[0], q.shape[-2], k.shape[-2]
    parts = []
    if "attn_mask" in x:
        m = x["attn_mask"]
        parts.append(m[:, None, None] if m.dim() == 3 else m.reshape(s, -1, heads, lq, lk))
    if "key_padding_mask" in x:
        m = x["key_padding_mask"]
        parts.append(m.reshape(s, -1, 1, 1, lk))
    mask = None
    for m in parts:
        m = (
            torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(m, -math.inf)
            if m.dtype == torch.bool
            else m.to(dtype)
        )
        mask = m if mask is None else mask + m
    return q, k, v, mask


Call = ResponsibilityCall | AttentionCall


_ROW_TENSORS = ("x", "query", "key", "value", "output", "g_output")


def lengths_first(x: Inputs) -> Inputs:
    """Kept ``nn.MultiheadAttention`` tensors of a ``batch_first`` module, ``[S, R, L, E]``, as
    ``[S, L, R, E]`` (views; masks and weights unchanged)."""
    return {n: t.transpose(1, 2) if n in _ROW_TENSORS else t for n, t in x.items()}


def _linear_steps(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    r""":math:`x_s W_s^\top + b_s` for each step ``s``: ``x[S, L, R, E]``, ``weight[S, E', E]``,
    ``bias[S, E']`` or None; ``[S, L, R, E']``."""
    s, length, r, e = x.shape
    flat = x.reshape(s, length * r, e)
    w = weight.transpose(-2, -1)
    y = torch.bmm(flat, w) if bias is None else torch.baddbmm(bias.unsqueeze(1), flat, w)
    return y.reshape(s, length, r, -1)


def _heads(t: Tensor) -> Tensor:
    """Attention tensors as ``[B, H, L, E]``: a missing head axis becomes H = 1."""
    if t.dim() == 3:
        return t.unsqueeze(1)
    if t.dim() > 4:
        return t.reshape(t.shape[0], -1, *t.shape[-2:])
    return t


class _Mode(TorchFunctionMode):
    """Routes the few functions that are sites to the capture; everything else passes through."""

    def __init__(self, capture: SiteCapture) -> None:
        super().__init__()
        self.capture = capture

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if self.capture._upstream:
            self.capture._resolve_upstream(func, args, kwargs)
        handler = self.capture.handlers.get(func)
        if handler is None:
            return func(*args, **kwargs)
        return handler(func, args, kwargs)


SiteKey = tuple[str | None, str, int]
"""Where a site is in a pass: (innermost module path or None, kind suffix, occurrence)."""


@dataclass(frozen=True)
class Plan:
    """Where a discovery pass found sites, for narrow capture on later measured steps.

    Attributes:
        names: every site found, by :data:`SiteKey`, with its discovery name.
        selected: the keys of the sites selected by the patterns.
        scopes: module paths in which any site was found (followed to attribute sites).
        active: module paths in which a selected site was found (the mode is on inside them).
        tail: a selected site outside every module, after the model's forward pass (the mode
            is on from the end of the model's forward pass until the optimizer step).
        modules: scopes that are stock ``nn.MultiheadAttention`` modules whose one site is
            their ``F.multi_head_attention_forward``: a narrow pass captures it from the
            module's inputs and output in a forward hook, without the mode.
    """

    names: dict[SiteKey, str]
    selected: frozenset[SiteKey]
    scopes: frozenset[str]
    active: frozenset[str]
    tail: bool
    modules: frozenset[str] = frozenset()


@dataclass(slots=True)
class CapturedPass:
    """What one forward pass (training step or probe) captured."""

    calls: list[Call] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    keys: dict[tuple[str | None, str], int] = field(default_factory=dict)
    found: dict[SiteKey, str] = field(default_factory=dict)
    early: set[SiteKey] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    live: bool = True
    selected: set[SiteKey] = field(default_factory=set)
    module_sites: set[SiteKey] = field(default_factory=set)
    plan: Plan | None = None
    unplanned: bool = False

    def to_plan(self) -> Plan | None:
        """The plan of a discovery pass; None when a selected site lies outside every module
        before the model ran (or without a model), where only a full discovery sees it."""
        top = {k for k in self.selected if k[0] is None}
        if top & self.early:
            return None
        per_scope = Counter(k[0] for k in self.found)
        modules = {k[0] for k in self.selected & self.module_sites if per_scope[k[0]] == 1}
        return Plan(
            names=dict(self.found),
            selected=frozenset(self.selected),
            scopes=frozenset(k[0] for k in self.found if k[0] is not None),
            active=frozenset(k[0] for k in self.selected if k[0] not in modules | {None}),
            tail=bool(top),
            modules=frozenset(modules),
        )

    def matches_plan(self) -> bool:
        """A narrow pass found exactly the planned selected sites and nothing unplanned."""
        return self.plan is not None and not self.unplanned and self.selected == self.plan.selected


class SiteCapture:
    """Discovers and captures sites while armed (measured steps only: no cost otherwise).

    A *discovery* pass (``arm()``) follows every module through global forward hooks and keeps
    the mode on for the whole step; it yields a :class:`Plan`. A *narrow* pass
    (``arm(plan)``) hooks only the planned scope modules, turns the mode on only inside the
    modules that hold selected sites (and after the model's forward pass for sites outside
    it), and names each site by its key in the plan, so the names are discovery's.

    Args:
        model: the model whose module paths name the sites (None: names are the bare site kinds).
        patterns: glob patterns (``fnmatch``) of site names to trace; None traces every site.
        max_rows: batch rows of each attention site used for its metrics.
        slots: the buffers that keep what measured passes capture (in row :attr:`slot`, which
            the tracer sets before each measured pass; None keeps clones); without it, clones.
    """

    def __init__(
        self,
        model: nn.Module | None,
        patterns: Sequence[str] | None,
        max_rows: int,
        slots: Slots | None = None,
    ) -> None:
        root = getattr(model, "module", model) if _is_wrapper(model) else model
        self.root = root
        self.modules: dict[str, nn.Module] = (
            {} if root is None else {n: m for n, m in root.named_modules()}
        )
        self.names: dict[int, str] = {id(m): n for n, m in self.modules.items()}
        self.patterns = None if patterns is None else list(patterns)
        self.max_rows = max_rows
        self.slots = Slots(0, 0) if slots is None else slots
        self.slot: int | None = None
        self.stack: list[str] = []
        self.origins: dict[int, tuple[weakref.ref, str]] = {}
        self.tracked: dict[int, tuple[weakref.ref, AttentionCall]] = {}
        self.logsm: dict[int, tuple[weakref.ref, Tensor, int]] = {}
        self.seen: set[str] = set()
        self.current = CapturedPass()
        self._selection: dict[str, bool] = {}
        self._mode: _Mode | None = None
        self._mode_on = False
        self._open = False
        self._registered: Plan | None = None
        self._depth = 0
        self._tail = False
        self._model_ran = False
        self._key: SiteKey | None = None
        self._hooks: list[Any] = []
        self._deferred: list[tuple[int, tuple, tuple, tuple]] = []
        self._in_model = False
        self._upstream: list[tuple[ResponsibilityCall, Tensor]] = []
        self._defer = False
        self._deferrable = True
        self.handlers: dict[Any, Callable[[Any, Sequence, dict], Any]] = {
            F.cross_entropy: self._cross_entropy,
            F.nll_loss: self._nll_loss,
            F.log_softmax: self._log_softmax,
            torch.log_softmax: self._log_softmax,
            Tensor.log_softmax: self._log_softmax,
            torch.logsumexp: self._logsumexp,
            F.softmax: self._softmax,
            torch.softmax: self._softmax,
            Tensor.softmax: self._softmax,
            F.dropout: self._dropout,
            torch.matmul: self._matmul,
            Tensor.matmul: self._matmul,
            Tensor.__matmul__: self._matmul,
            torch.bmm: self._matmul,
            F.scaled_dot_product_attention: self._sdpa,
            F.multi_head_attention_forward: self._mha,
        }
        for fn in _PROVENANCE:
            self.handlers.setdefault(fn, self._provenance)
        for fn in (torch.where, Tensor.to, Tensor.masked_fill, Tensor.contiguous):
            self.handlers[fn] = self._carry

    # -- arming ---------------------------------------------------------------------------------

    @property
    def armed(self) -> bool:
        """Whether a measured pass is being observed now (between :meth:`arm` and
        :meth:`close`)."""
        return self._open

    def arm(self, plan: Plan | None = None) -> None:
        """Observe a discovery pass (``plan=None``) or a narrow pass following ``plan``.

        The module hooks of the previous pass are reused when they were registered for the
        same plan (consecutive measured steps): re-arming then costs nothing."""
        if self._open:
            return
        self.current.plan = plan
        if self._mode is None or self._registered is not plan:
            self.disarm()
            self._register(plan)
        self._open = True
        if plan is None:
            self._switch(True)

    def _register(self, plan: Plan | None) -> None:
        """Register the hooks of a discovery pass (global module hooks) or of a narrow pass
        (the planned scope modules, and the model's end for a loss outside it)."""
        self._mode = _Mode(self)
        self._registered = plan
        self._hooks = [register_optimizer_step_pre_hook(self._optimizer_step)]
        if plan is None:
            self._hooks += [
                nn.modules.module.register_module_forward_pre_hook(self._enter_module),
                nn.modules.module.register_module_forward_hook(self._exit_module, always_call=True),
            ]
            return
        for path in plan.scopes:
            module = self.modules[path]
            if path in plan.modules:
                self._hooks.append(module.register_forward_hook(self._mha_module, with_kwargs=True))
                continue
            self._hooks += [
                module.register_forward_pre_hook(self._enter_scope),
                module.register_forward_hook(self._exit_scope, always_call=True),
            ]
        self._defer = bool(plan.modules) and self.root is not None and self._deferrable
        if self._defer:
            self._hooks.append(self.root.register_forward_pre_hook(self._model_starts))
        if (plan.tail or self._defer) and self.root is not None:
            self._hooks.append(self.root.register_forward_hook(self._model_done, always_call=True))

    def close(self) -> None:
        """Stop observing (the mode is left, the hooks stay registered but do nothing) until
        the next :meth:`arm`."""
        self._materialize()
        self._switch(False)
        self._open = False
        self._depth = 0
        self._tail = False

    def disarm(self) -> None:
        """Stop observing and remove every hook."""
        self.close()
        self._mode = None
        self._registered = None
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def suspend(self) -> tuple[Plan | None, bool] | None:
        """Stop observing for a while, with every hook removed (suspended code runs as if
        untraced); returns what :meth:`resume` needs (None if not armed)."""
        if not self._open:
            return None
        state = (self.current.plan, self._tail)
        self.disarm()
        return state

    def resume(self, state: tuple[Plan | None, bool] | None) -> None:
        """Observe again as :meth:`suspend` left it: the same pass, plan and loss-tail state."""
        if state is None:
            return
        plan, tail = state
        self.arm(plan)
        if tail:
            self._tail = True
            self._switch(True)

    def _switch(self, on: bool) -> None:
        """Enter or leave the mode (it is on top of the mode stack while this capture runs)."""
        if on and not self._mode_on:
            self._mode.__enter__()
        elif not on and self._mode_on:
            if self._upstream:
                self._resolve_upstream(None, (), {})
            self._mode.__exit__(None, None, None)
        self._mode_on = on

    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The step's forward and backward are over: the optimizer runs unobserved."""
        self.close()

    def take(self) -> CapturedPass:
        """Hand over the captured pass and start a new one (its gradient hooks do nothing
        from now on)."""
        self._materialize()
        self._upstream.clear()
        self._in_model = False
        done, self.current = self.current, CapturedPass()
        done.calls = [c for c in done.calls if c is not None]
        done.live = False
        self.stack.clear()
        self.origins.clear()
        self.tracked.clear()
        self.logsm.clear()
        self._model_ran = False
        return done

    # -- naming ---------------------------------------------------------------------------------

    def _enter_module(self, module: nn.Module, args: Any) -> None:
        if not self._open:
            return
        name = self.names.get(id(module))
        if name is not None:
            self.stack.append(name)

    def _exit_module(self, module: nn.Module, args: Any, output: Any) -> None:
        if not self._open:
            return
        name = self.names.get(id(module))
        if name is None:
            return
        if self.stack and self.stack[-1] == name:
            self.stack.pop()
        if module is self.root:
            self._model_ran = True
        if isinstance(output, Tensor) and name:
            self.origins[id(output)] = (weakref.ref(output), name)

    def _enter_scope(self, module: nn.Module, args: Any) -> None:
        """Narrow pass: a planned scope module starts (the mode is on inside active scopes)."""
        if not self._open:
            return
        name = self.names[id(module)]
        self.stack.append(name)
        if name in self.current.plan.active:
            self._depth += 1
            self._switch(True)

    def _exit_scope(self, module: nn.Module, args: Any, output: Any) -> None:
        if not self._open:
            return
        name = self.names[id(module)]
        if self.stack and self.stack[-1] == name:
            self.stack.pop()
        if name in self.current.plan.active:
            self._depth -= 1
            self._switch(self._depth > 0 or self._tail)

    def _model_starts(self, module: nn.Module, args: Any) -> None:
        self._in_model = self._open

    def _model_done(self, module: nn.Module, args: Any, output: Any) -> None:
        """Narrow pass: the model's forward is over. The deferred module sites are captured
        now; sites outside the model (the loss) follow."""
        self._in_model = False
        if not self._open:
            return
        self._materialize()
        if self.current.plan.tail:
            self._tail = True
            self._switch(True)

    def _materialize(self) -> None:
        """Capture the module sites deferred since the last call (:meth:`_mha_module`), in
        their places in the pass. If a site's activations were changed in place since its
        module returned, later passes capture at once, and this pass keeps the site without its
        output (changed output: no forward residual) or not at all (changed inputs)."""
        if not self._deferred:
            return
        deferred, self._deferred = self._deferred, []
        for index, tensors, versions, site in deferred:
            now = tuple(t._version for t in tensors)
            if now != versions:
                self._defer = self._deferrable = False
                if now[:3] != versions[:3]:
                    continue
            self.current.calls[index] = self._module_site(*site, with_output=now == versions)

    def _origin(self, t: Any) -> str | None:
        entry = _entry(self.origins, t)
        return None if entry is None else entry[1]

    def _provenance(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        if self.origins and isinstance(out, Tensor) and args:
            origin = self._origin(args[0])
            if origin is not None:
                self.origins[id(out)] = (weakref.ref(out), origin)
        return out

    def _name(self, suffix: str, source: Any = None, scope: str | None = None) -> str | None:
        """The unique name of a new site, or None when the patterns do not select it.

        A discovery pass names it by the module that produced ``source`` (else the innermost
        module); a narrow pass looks its key up in the plan (None when the key is unplanned).
        The site's scope is the innermost module on the stack, or ``scope`` when given.
        """
        p = self.current
        if scope is None and self.stack:
            scope = self.stack[-1]
        n = p.keys.get((scope, suffix), 0) + 1
        p.keys[(scope, suffix)] = n
        key = (scope, suffix, n)
        self._key = key
        if p.plan is not None:
            name = p.plan.names.get(key)
            if name is None:
                p.unplanned = True
                return None
            p.found[key] = name
            if key not in p.plan.selected:
                p.skipped.add(name)
                return None
            p.selected.add(key)
            return name
        name = self._discovered_name(suffix, source)
        if scope is None and not self._model_ran:
            p.early.add(key)
        p.found[key] = name
        self.seen.add(name)
        if not self._selected(name):
            p.skipped.add(name)
            return None
        p.selected.add(key)
        return name

    def _discovered_name(self, suffix: str, source: Any) -> str:
        origin = self._origin(source)
        path = origin if origin is not None else (self.stack[-1] if self.stack else "")
        base = f"{path}.{suffix}" if path and suffix else (path or suffix or "attention")
        count = self.current.counts.get(base, 0) + 1
        self.current.counts[base] = count
        return base if count == 1 else f"{base}#{count}"

    def _selected(self, name: str) -> bool:
        """Whether the patterns select ``name`` (cached per name)."""
        chosen = self._selection.get(name)
        if chosen is None:
            chosen = self.patterns is None or any(
                fnmatch.fnmatchcase(name, p) for p in self.patterns
            )
            self._selection[name] = chosen
        return chosen

    def _keep_gradient(
        self,
        t: Tensor,
        call: Any,
        attr: str,
        key: tuple,
        like: Tensor,
        take: Callable[[Tensor], Tensor] | None = None,
        dtype: torch.dtype | None = None,
        post: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        """A gradient hook on ``t`` (if it requires grad) that sets ``call.<attr>`` to a copy of
        its gradient (or of ``take(gradient)``, shaped like ``like``; seen through ``post``):
        copied into the destination row resolved now, in the pass's slot buffers (a clone when
        there is none or the shape differs). Once the pass is taken the hook does nothing (it
        is not removed: removing costs more, and the tensor rarely outlives the step)."""
        if not (isinstance(t, Tensor) and t.requires_grad):
            return
        slots, slot = self.slots, self.slot
        destination = slots.destination(
            key, slot, like.shape, like.dtype if dtype is None else dtype, like.device
        )
        kept = destination if destination is None or post is None else post(destination)
        captured = self.current

        def hook(g: Tensor) -> None:
            if not captured.live:
                return
            with untraced():
                if take is not None:
                    g = take(g)
                if destination is not None and g.shape == destination.shape:
                    # Hooks run with grad mode on only under create_graph=True.
                    destination.copy_(g.detach() if g.requires_grad else g)
                    setattr(call, attr, kept)
                else:
                    clone = slots.keep(key, None, [g], (dtype,))[0]
                    setattr(call, attr, clone if post is None else post(clone))

        t.register_hook(hook)

    def _keep(
        self, name: str, tag: str, sources: Sequence[Tensor], dtypes: tuple | None = None
    ) -> list[Tensor]:
        """Copies of ``sources`` kept for site ``name`` in this pass's slot row
        (:meth:`~implicit_em.trace.slots.Slots.keep`)."""
        return self.slots.keep((name, tag), self.slot, sources, dtypes)

    def _keep_rows_gradient(self, t: Tensor, call: AttentionCall, attr: str) -> None:
        """Keep the first ``call.rows`` batch rows of the gradient of ``t`` as ``call.<attr>``,
        with a head axis (:func:`_heads`)."""
        rows = call.rows
        like = t[:rows]
        self._keep_gradient(t, call, attr, (call.name, attr), like, lambda g: g[:rows], post=_heads)

    def _responsibility_hooks(self, call: ResponsibilityCall, out: Tensor, source: Tensor) -> None:
        """Gradient hooks that keep the gradient of the loss output ``out`` (the call's
        ``upstream``) and of its ``source`` (logits or distances, as ``grad``, in the logits'
        dtype) in the call's slot row.

        While the mode is on, the upstream gradient waits for the next function the mode sees
        (:meth:`_resolve_upstream`): when that is ``out.backward()`` it is 1 and needs no hook
        (a gradient hook costs ~25 us of a CPU step)."""
        if self._mode_on and isinstance(out, Tensor) and out.requires_grad:
            self._upstream.append((call, out))
        else:
            self._keep_upstream(call, out)
        dtype = call.logits.dtype
        self._keep_gradient(source, call, "grad", (call.name, "grad"), source, dtype=dtype)

    def _keep_upstream(self, call: ResponsibilityCall, out: Tensor) -> None:
        self._keep_gradient(out, call, "upstream", (call.name, "upstream"), out)

    def _resolve_upstream(self, func: Any, args: Sequence, kwargs: dict) -> None:
        """The upstream gradients of the losses captured since the mode last saw a function:
        before ``func(*args, **kwargs)`` runs, 1 for a scalar loss on which it is
        ``Tensor.backward`` with the default gradient, else a gradient hook (``func`` None: the
        mode is being left)."""
        pending, self._upstream = self._upstream, []
        default_backward = (
            func is Tensor.backward
            and (args[1] if len(args) > 1 else kwargs.get("gradient")) is None
        )
        for call, out in pending:
            if default_backward and args[0] is out and out.numel() == 1:
                one = self.slots.destination(
                    (call.name, "upstream"), self.slot, out.shape, out.dtype, out.device
                )
                with untraced(), torch.no_grad():
                    call.upstream = torch.ones_like(out) if one is None else one.fill_(1)
            else:
                self._keep_upstream(call, out)

    # -- classification and mixture sites -------------------------------------------------------

    def _add_classification(
        self,
        suffix: str,
        z: Tensor,
        target: Tensor,
        weight: Tensor | None,
        ignore_index: int,
        reduction: str,
        smoothing: float,
        out: Tensor,
    ) -> None:
        if z.dim() == 1:
            return self._add_classification(
                suffix,
                z.unsqueeze(0),
                target.unsqueeze(0),
                weight,
                ignore_index,
                reduction,
                smoothing,
                out,
            )
        name = self._name(suffix, z)
        if name is None:
            return None
        dtype = torch.float32 if z.dtype in (torch.float16, torch.bfloat16) else z.dtype
        logits = z if z.dim() == 2 else _rows(z.detach(), 1)
        if target.is_floating_point():
            soft = target if target.dim() == 2 else _rows(target.detach(), 1)
            logits, soft = self._keep(name, "forward", [logits, soft], (dtype, dtype))
            call = ResponsibilityCall(
                name,
                "classification",
                logits,
                1.0,
                _rows1,
                target=soft,
                smoothing=smoothing,
                reduction=reduction,
            )
        else:
            sources = [logits, target.reshape(-1)] + ([] if weight is None else [weight])
            kept = self._keep(name, "forward", sources, (dtype, None, dtype)[: len(sources)])
            call = ResponsibilityCall(
                name,
                "classification",
                kept[0],
                1.0,
                _rows1,
                labels=kept[1],
                class_weight=kept[2] if weight is not None else None,
                ignore_index=ignore_index,
                smoothing=smoothing,
                reduction=reduction,
            )
        self.current.calls.append(call)
        self._responsibility_hooks(call, out, z)
        return None

    def _cross_entropy(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        p = _CE_SIGNATURE(args, kwargs)
        reduction = _reduction(p)
        self._add_classification(
            "ce",
            p["input"],
            p["target"],
            p["weight"],
            p["ignore_index"],
            reduction,
            float(p["label_smoothing"]),
            out,
        )
        return out

    def _log_softmax(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        local = _caller_locals(_PACKAGE_CE)
        if local is not None:
            self._package_cross_entropy(local, args[0], out)
            return out
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if isinstance(out, Tensor) and isinstance(dim, int):
            self.logsm[id(out)] = (weakref.ref(out), args[0], dim % out.dim())
        return out

    def _nll_loss(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        p = _NLL_SIGNATURE(args, kwargs)
        entry = _entry(self.logsm, p["input"])
        if entry is None:
            return out
        _, z, dim = entry
        if dim != min(1, z.dim() - 1):
            return out
        self._add_classification(
            "nll", z, p["target"], p["weight"], p["ignore_index"], _reduction(p), 0.0, out
        )
        return out

    def _package_cross_entropy(self, local: dict, safe: Tensor, out: Tensor) -> None:
        d, t, dim = local["d"], local["t"], local["dim"]
        name = self._name("ce", d)
        if name is None:
            return
        logits, target = self._keep(
            name, "forward", [_rows(safe.detach(), dim), _rows(t.detach(), dim)], (None, safe.dtype)
        )
        call = ResponsibilityCall(
            name,
            "classification",
            logits,
            -1.0,
            lambda g: _rows(g, dim),
            target=target,
            factor=lambda u: -_rows(u, dim).sum(-1),
        )
        self.current.calls.append(call)
        self._responsibility_hooks(call, out, d)

    def _logsumexp(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        local = _caller_locals(_PACKAGE_MIXTURE)
        if local is None:
            return out
        d, dim = local["d"], local["dim"]
        name = self._name("mixture", d)
        if name is None:
            return out
        (logits,) = self._keep(name, "forward", [_rows(args[0].detach(), dim)])
        call = ResponsibilityCall(
            name,
            "mixture",
            logits,
            1.0,
            lambda g: _rows(g, dim),
            factor=lambda u: -u.reshape(-1),
        )
        self.current.calls.append(call)
        self._responsibility_hooks(call, out, d)
        return out

    # -- attention sites ------------------------------------------------------------------------

    def _softmax(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        x = args[0]
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if not isinstance(x, Tensor) or x.dim() < 3 or dim not in (-1, x.dim() - 1):
            return out
        name = self._name("", None)
        if name is None:
            return out
        rows = self.max_rows
        (alpha,) = self._keep(name, "alpha", [out[:rows]])
        call = AttentionCall(name, alpha=_heads(alpha), rows=rows)
        self.current.calls.append(call)
        self.tracked[id(out)] = (weakref.ref(out), call)
        self._keep_rows_gradient(out, call, "grad_alpha")
        return out

    def _tracked(self, t: Any) -> AttentionCall | None:
        entry = _entry(self.tracked, t)
        return None if entry is None else entry[1]

    def _carry(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        """Elementwise ops on attention weights (``where``, ``to``) keep them tracked."""
        out = self._provenance(func, args, kwargs)
        if self.tracked and isinstance(out, Tensor):
            for a in args:
                call = self._tracked(a)
                if call is not None and a.shape == out.shape:
                    self.tracked[id(out)] = (weakref.ref(out), call)
                    break
        return out

    def _dropout(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        call = self._tracked(args[0] if args else kwargs.get("input"))
        if call is not None and isinstance(out, Tensor):
            self.tracked[id(out)] = (weakref.ref(out), call)
        return out

    def _matmul(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        call = self._tracked(args[0]) if len(args) == 2 else None
        if call is None or call.v is not None:
            return out
        rows = call.rows
        used, v = self._keep(call.name, "matmul", [args[0][:rows], args[1][:rows]])
        call.used, call.v = _heads(used), _heads(v)
        self._keep_rows_gradient(out, call, "g")
        self._keep_rows_gradient(args[1], call, "grad_v")
        return out

    def _sdpa(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        p = dict(zip(_SDPA_PARAMS, args, strict=False))
        p.update(kwargs)
        name = self._name("", None)
        if name is None:
            return out
        rows = self.max_rows
        sources = [p["query"][:rows], p["key"][:rows], p["value"][:rows], out[:rows]]
        mask = p.get("attn_mask")
        if isinstance(mask, Tensor):
            sources.append(mask[:rows] if mask.dim() == sources[0].dim() else mask)
        kept = self._keep(name, "forward", sources)
        q, k, v = kept[:3]
        if p.get("enable_gqa") and k.shape[-3] != q.shape[-3]:
            k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
            v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
        call = AttentionCall(
            name,
            q=_heads(q),
            k=_heads(k),
            mask=_mask_heads(kept[4]) if len(kept) > 4 else None,
            is_causal=bool(p.get("is_causal", False)),
            scale=p.get("scale"),
            v=_heads(v),
            output=_heads(kept[3]),
            reconstruct="matmul",
            rows=rows,
        )
        self.current.calls.append(call)
        self._keep_rows_gradient(out, call, "g")
        self._keep_rows_gradient(p["value"], call, "grad_v")
        return out

    def _mha(self, func: Any, args: Sequence, kwargs: dict) -> Any:
        out = func(*args, **kwargs)
        p = _MHA_SIGNATURE(args, kwargs)
        unsupported = p["bias_k"] is not None or p["add_zero_attn"] or p["static_k"] is not None
        if p["query"].dim() != 3 or unsupported:
            return out
        name = self._name("", None)
        if name is None:
            return out
        p["self_attention"] = p["query"] is p["key"] is p["value"]
        self.current.calls.append(self._mha_site(name, p, out[0], False))
        if self._key[2] == 1 and self._key[0] is not None:
            module = self.modules[self._key[0]]
            if _stock_mha(module) and p["out_proj_weight"] is module.out_proj.weight:
                self.current.module_sites.add(self._key)
        return out

    def _mha_module(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        """Narrow pass: the site of a stock ``nn.MultiheadAttention`` from its inputs and
        output (what ``F.multi_head_attention_forward`` received, see :func:`_module_mha`).
        Inside the model's forward pass it is captured when that ends (:meth:`_materialize`),
        with the other module sites of the pass; called outside it, at once."""
        if not self._open:
            return
        query, key, value = _mha_inputs(args, kwargs)
        if query.dim() != 3 or module.bias_k is not None or module.add_zero_attn:
            return
        name = self._name("", None, self.names[id(module)])
        if name is None:
            return
        site = (name, module, args, kwargs, output[0])
        if not (self._defer and self._in_model):
            self.current.calls.append(self._module_site(*site))
            return
        # Capture at the model's end, together with the other deferred sites: a capture's
        # first run after the model's own kernels costs several times the next one's.
        tensors = (query, key, value, output[0])
        versions = tuple(t._version for t in tensors)
        self._deferred.append((len(self.current.calls), tensors, versions, site))
        self.current.calls.append(None)

    def _module_site(
        self,
        name: str,
        module: nn.MultiheadAttention,
        args: tuple,
        kwargs: dict,
        y: Tensor,
        with_output: bool = True,
    ) -> AttentionCall:
        p = _module_mha(module, args, kwargs)
        return self._mha_site(name, p, y, module.batch_first, with_output)

    def _mha_site(
        self, name: str, p: dict, y: Tensor, rows_first: bool, with_output: bool = True
    ) -> AttentionCall:
        r"""A site of ``F.multi_head_attention_forward`` on the first ``max_rows`` batch rows.

        ``p`` holds what that function takes, see :func:`_module_mha`; its inputs and the
        output ``y`` are ``[N, L, E]`` when ``rows_first`` (a ``batch_first`` module's own
        tensors), else ``[L, N, E]``, and are kept in that layout (the flush swaps the axes,
        :func:`lengths_first`). One copy into the site's slot row keeps the traced input rows
        (``x`` for self-attention; else ``query``, ``key``, ``value``), the
        projection weights and biases the step used (the optimizer changes them in place), the
        masks and the output rows (unless ``with_output`` is False: no forward residual); the
        in-projections and heads are computed at the flush,
        batched over steps (:func:`projected_heads`): a capture runs no product, whose first
        run after the model's own kernels costs several times its warm time. One gradient hook
        keeps the traced rows of the output's gradient.
        """
        rows, heads = self.max_rows, p["num_heads"]
        names, sources = [], []
        if not p["use_separate_proj_weight"] and p["self_attention"]:
            names.append("x")
            sources.append(p["query"][:rows] if rows_first else p["query"][:, :rows])
        else:
            names += ("query", "key", "value")
            inputs = (p["query"], p["key"], p["value"])
            sources += [t[:rows] if rows_first else t[:, :rows] for t in inputs]
        if p["use_separate_proj_weight"]:
            names += ("q_weight", "k_weight", "v_weight")
            sources += (p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"])
        else:
            names.append("in_weight")
            sources.append(p["in_proj_weight"])
        for n, t in (("in_bias", p["in_proj_bias"]), ("out_bias", p["out_proj_bias"])):
            if t is not None:
                names.append(n)
                sources.append(t)
        if p["attn_mask"] is not None:
            m = p["attn_mask"]
            names.append("attn_mask")
            sources.append(m[: rows * heads] if m.dim() == 3 else m)
        if p["key_padding_mask"] is not None:
            names.append("key_padding_mask")
            sources.append(p["key_padding_mask"][:rows])
        output = y[:rows] if rows_first else y[:, :rows]
        if with_output:
            names.append("output")
            sources.append(output)
        names.append("out_weight")
        sources.append(p["out_proj_weight"])
        projection = dict(zip(names, self._keep(name, "forward", sources), strict=True))
        call = AttentionCall(
            name,
            scale=1.0 / math.sqrt(p["query"].shape[-1] // heads),
            output=projection.pop("output", None),
            reconstruct="projection",
            out_weight=projection.pop("out_weight"),
            out_bias=projection.pop("out_bias", None),
            projection=projection,
            heads=heads,
            rows=rows,
            rows_first=rows_first,
        )
        if y.requires_grad:
            take = (lambda g: g[:rows]) if rows_first else (lambda g: g[:, :rows])
            self._keep_gradient(y, call, "g", (name, "grad"), output, take)
        return call


def _mask_heads(mask: Tensor) -> Tensor:
    return mask.unsqueeze(1) if mask.dim() == 3 else mask


def _stock_mha(module: nn.Module) -> bool:
    """A ``nn.MultiheadAttention`` whose ``forward`` is the stock one."""
    return isinstance(module, nn.MultiheadAttention) and (
        type(module).forward is nn.MultiheadAttention.forward
    )


_MODULE_MHA_ARGS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask")


def _mha_inputs(args: tuple, kwargs: dict) -> tuple[Tensor, Tensor, Tensor]:
    """The query, key and value of a ``nn.MultiheadAttention.forward`` call."""
    n = len(args)
    return (
        args[0] if n > 0 else kwargs["query"],
        args[1] if n > 1 else kwargs["key"],
        args[2] if n > 2 else kwargs["value"],
    )


def _module_mha(module: nn.MultiheadAttention, args: tuple, kwargs: dict) -> dict:
    """What ``nn.MultiheadAttention.forward`` passes to ``F.multi_head_attention_forward`` for
    batched inputs without ``bias_k`` and ``add_zero_attn`` (the forms the tracer follows):
    the inputs (as the module has them: ``[N, L, E]`` when ``batch_first``), boolean masks made
    additive (``-inf`` where True) in the inputs' dtype, the projection weights."""
    b = dict(zip(_MODULE_MHA_ARGS, args, strict=False)) if args else {}
    if kwargs:
        b.update(kwargs)
    query, key, value = b["query"], b["key"], b["value"]
    self_attention = query is key is value
    params = module._parameters
    out = module.out_proj._parameters
    separate = not module._qkv_same_embed_dim
    p = {
        "query": query,
        "key": key,
        "value": value,
        "self_attention": self_attention,
        "num_heads": module.num_heads,
        "use_separate_proj_weight": separate,
        "in_proj_weight": params["in_proj_weight"],
        "in_proj_bias": params["in_proj_bias"],
        "out_proj_weight": out["weight"],
        "out_proj_bias": out["bias"],
    }
    if separate:
        for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
            p[n] = params[n]
    for n in ("attn_mask", "key_padding_mask"):
        m = b.get(n)
        if m is not None and m.dtype == torch.bool:
            m = torch.zeros(m.shape, dtype=query.dtype, device=m.device).masked_fill_(m, -math.inf)
        p[n] = m
    return p


def _reduction(p: dict) -> str:
    if p.get("size_average") is not None or p.get("reduce") is not None:
        return torch.nn._reduction.legacy_get_string(p["size_average"], p["reduce"])
    return p["reduction"]


_PACKAGE_MIXTURE = objectives.mixture_nll.__code__
_PACKAGE_CE = objectives.cross_entropy.__code__


def _caller_locals(code: Any, depth: int = 8) -> dict | None:
    """The locals of the nearest caller frame running ``code`` (this package's objectives)."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code is code:
            return frame.f_locals
        frame = frame.f_back
    return None


def _is_wrapper(model: Any) -> bool:
    return isinstance(model, nn.DataParallel | nn.parallel.DistributedDataParallel)


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

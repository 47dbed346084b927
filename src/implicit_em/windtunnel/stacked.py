r"""S seeds of one wind-tunnel model as one set of stacked parameters.

`StackedModel` holds the parameters of S models of the same configuration, each initialized as
`torch.manual_seed(seed); build_model(config, task)` does, stacked on a first axis
(`torch.func.stack_module_state`). Its forward maps `tokens[S, B, T]` to `logits[S, B, T, K]`:
`torch.func.vmap` over the seeds of `functional_call` of one template model, so every seed runs
the model's own forward on its own rows. `seed_view(i)` is seed `i`'s model alone (for the
held-out evaluation), reading the stacked tensors.

The CPU attention kernel (`scaled_dot_product_attention`) has no vmap batching rule: vmap
would run it once per seed and, in the backward, add up a full-size zero gradient per seed.
`StackedAttention` runs it once on the seeds' rows laid side by side in the batch axis
instead, `[S, B, H, T, D] -> [S B, H, T, D]`: each (sequence, head) row is computed by the same
kernel as alone. The linear layers run as one batched matmul over the seeds, which some CPUs
(AMD EPYC, not Intel Xeon) round otherwise than the single matmul of a run alone: each seed
equals its run alone to float32 rounding (tested at a relative 1e-5).

With `compile=True` the vmapped forward goes through `torch.compile`: fused kernels, equal to
the eager forward to float tolerance (not bit for bit).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch._C._functorch as functorch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.optim import part_of
from implicit_em.windtunnel.tasks import Task

__all__ = ["StackedAttention", "StackedModel", "parameter_groups"]


class StackedAttention(TorchFunctionMode):
    """Under `vmap`, run `F.scaled_dot_product_attention` once on all seeds' rows (see the
    module); anything else, and attention whose inputs are not all batched at one level, as is."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            stacked = _unbatch(args[:3])
            if stacked is not None:
                level, qkv = stacked
                flat = [t.reshape(-1, *t.shape[2:]) for t in qkv]
                out = func(*flat, *args[3:], **kwargs)
                return functorch._add_batch_dim(out.view(*qkv[2].shape[:-1], -1), 0, level)
        return func(*args, **kwargs)


def _unbatch(tensors: tuple[Tensor, ...]) -> tuple[int, list[Tensor]] | None:
    """The vmap level of `tensors` and their plain values with the seed axis first, when all
    are batched at the same level; else None."""
    if not all(functorch.is_batchedtensor(t) for t in tensors):
        return None
    level = functorch.maybe_get_level(tensors[0])
    plain = []
    for t in tensors:
        if functorch.maybe_get_level(t) != level:
            return None
        value, dim = functorch._unwrap_batched(t, level)
        plain.append(value.movedim(dim, 0))
    return level, plain


def parameter_groups(config: RunConfig, names: Sequence[str]) -> dict[str, str]:
    """The optimizer group of each parameter: its part of a split transformer, else `"all"`
    (as `optim.make_optimizer` groups a single model)."""
    if config.split_qkv and config.model == "transformer":
        return {n: part_of(n) for n in names}
    return {n: "all" for n in names}


class _SeedView(nn.Module):
    """One seed's model: the template's forward on that seed's rows of the stacked tensors."""

    def __init__(self, template: nn.Module, tensors: dict[str, Tensor]) -> None:
        super().__init__()
        self.template = template
        self.tensors = tensors

    def forward(self, tokens: Tensor) -> Tensor:
        return functional_call(self.template, self.tensors, (tokens,))


class StackedModel:
    """The parameters `{name: [S, ...]}` of S seeds' models and their batched forward."""

    def __init__(
        self, config: RunConfig, task: Task, seeds: Sequence[int], compile: bool = False
    ) -> None:
        models = []
        for seed in seeds:
            torch.manual_seed(seed)
            models.append(build_model(replace(config, seed=seed), task))
        params, buffers = stack_module_state(models)
        self.template = models[0]
        self.params: dict[str, Tensor] = params
        self.buffers: dict[str, Tensor] = buffers
        forward = vmap(self._one)
        self.compiled = compile
        self._forward: Callable[..., Tensor] = torch.compile(forward) if compile else forward

    def _one(self, params: dict[str, Tensor], buffers: dict[str, Tensor], tokens: Tensor) -> Tensor:
        return functional_call(self.template, (params, buffers), (tokens,))

    def to(self, device: str) -> StackedModel:
        self.template.to(device)
        self.params = {n: p.detach().to(device).requires_grad_() for n, p in self.params.items()}
        self.buffers = {n: b.to(device) for n, b in self.buffers.items()}
        return self

    def __call__(self, tokens: Tensor) -> Tensor:
        """`tokens[S, B, T] -> logits[S, B, T, K]`, seed by seed."""
        if self.compiled:  # vmap runs the attention kernel once per seed there, and warns
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*batching rule for aten::_scaled_dot")
                return self._forward(self.params, self.buffers, tokens)
        with StackedAttention():
            return self._forward(self.params, self.buffers, tokens)

    def seed_view(self, row: int) -> nn.Module:
        """The model of the seed at `row` (reads the current stacked tensors, no copy)."""
        tensors = {n: t[row].detach() for n, t in {**self.params, **self.buffers}.items()}
        return _SeedView(self.template, tensors)

    def keep(self, rows: Tensor) -> None:
        """Keep the seeds at `rows` only (the others have finished)."""
        self.params = {n: p.detach()[rows].clone().requires_grad_() for n, p in self.params.items()}
        self.buffers = {n: b[rows].clone() for n, b in self.buffers.items()}

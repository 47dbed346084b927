"""Shared helpers of the tracer tests: a seeded training loop run with and without the tracer."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from implicit_em.trace import Tracer


def train(
    make: Callable[[], nn.Module],
    step: Callable[[nn.Module], torch.Tensor],
    n: int,
    tracer_kwargs: dict | None,
    seed: int = 0,
) -> tuple[nn.Module, Tracer | None]:
    """Train a fresh model for ``n`` SGD steps; with ``tracer_kwargs`` inside a Tracer."""
    torch.manual_seed(seed)
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def loop(tracer: Tracer | None) -> None:
        for _ in range(n):
            step(model).backward()
            opt.step()
            opt.zero_grad()
            if tracer is not None:
                tracer.step()

    if tracer_kwargs is None:
        loop(None)
        return model, None
    with Tracer(model, **tracer_kwargs) as tracer:
        loop(tracer)
    return model, tracer


def assert_same_parameters(a: nn.Module, b: nn.Module) -> None:
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(p, q), f"parameter {name} changed by tracing"

"""Shared helpers of the tracer tests: a seeded training loop run with and without the tracer,
and a small Hugging Face GPT-2 built from a config (random weights, no download)."""

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


def site_records(tracer: Tracer) -> list[dict]:
    """The site records of `tracer.history` (alarms left out), in order."""
    return [r for r in tracer.history if r["kind"] == "site"]


def assert_same_parameters(a: nn.Module, b: nn.Module) -> None:
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(p, q), f"parameter {name} changed by tracing"


def small_gpt2(
    impl: str, vocab_size: int = 40, n_positions: int = 12, n_embd: int = 32, dropout: float = 0.0
) -> nn.Module:
    """A 2-layer, 4-head ``GPT2LMHeadModel`` with attention ``impl`` (``"eager"`` or
    ``"sdpa"``), without dropout unless ``dropout`` (attention, residual and embedding) is
    given; needs ``transformers``."""
    import transformers

    cfg = transformers.GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=2,
        n_head=4,
        attn_pdrop=dropout,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel._from_config(cfg, attn_implementation=impl)

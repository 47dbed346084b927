"""A compiled model (`torch.compile`): measured steps run eagerly and are traced exactly as
without compilation; the steps between them run the compiled graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

from implicit_em.trace import Tracer


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.attn(x, x, x)[0].mean(1)), y)


def _run(compiled: bool) -> list[dict]:
    torch.manual_seed(0)
    model = _Model()
    run = torch.compile(model, backend="aot_eager") if compiled else model
    x, y = torch.randn(16, 5, 8), torch.randint(0, 4, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model, every=2) as tracer:
        for _ in range(5):
            run(x, y).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    return [r for r in tracer.history if r["kind"] == "site"]


def test_measured_steps_of_a_compiled_model_are_traced_as_eager_ones():
    torch._dynamo.reset()
    counters.clear()
    eager, compiled = _run(False), _run(True)
    # one graph, compiled at step 1 and run again at step 3; the measured steps ran eagerly
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
    assert [(r["step"], r["site"]) for r in compiled] == [
        (s, site) for s in (0, 2, 4) for site in ("attn", "head.ce")
    ]
    assert [(r["step"], r["site"]) for r in compiled] == [(r["step"], r["site"]) for r in eager]
    for a, b in zip(eager, compiled, strict=True):
        assert b["missing"] == [] and a["missing"] == []
        for key, value in a.items():
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_the_compiler_stance_is_restored_after_the_tracer():
    torch._dynamo.reset()
    counters.clear()
    _run(True)
    before = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    model = torch.compile(_Model(), backend="aot_eager")
    model(torch.randn(2, 5, 8), torch.randint(0, 4, (2,)))
    assert counters["stats"]["unique_graphs"] > before  # compiled again, not forced eager

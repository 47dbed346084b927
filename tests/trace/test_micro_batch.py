"""`Tracer.micro_batch`: the micro-batches of one optimizer step are one measurement, equal to
the measurement of the whole batch at once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import Tracer


def _records(split: int, probe: bool) -> list[dict]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 4))
    layer = nn.MultiheadAttention(8, 2, batch_first=True)
    x, y = torch.randn(32, 5), torch.randint(0, 4, (32,))
    seq = torch.randn(32, 3, 8)
    kwargs = {"probe": lambda: F.cross_entropy(model(x[:8]), y[:8])} if probe else {}
    opt = torch.optim.SGD([*model.parameters(), *layer.parameters()], lr=0.1)
    with Tracer(model, flush_every=1, max_rows=32, **kwargs) as tracer:
        for _ in range(2):
            for part in range(split):
                rows = slice(part * 32 // split, (part + 1) * 32 // split)
                attn = layer(seq[rows], seq[rows], seq[rows])[0].pow(2).mean()
                loss = F.cross_entropy(model(x[rows]), y[rows]) + attn
                (loss / split).backward()
                if part < split - 1:
                    tracer.micro_batch()
            opt.step()
            opt.zero_grad()
            tracer.step()
    return [r for r in tracer.history if r["kind"] == "site"]


@pytest.mark.parametrize("probe", [False, True])
def test_micro_batches_add_up_to_the_whole_batch(probe):
    whole, parts = _records(1, probe), _records(4, probe)
    assert [(r["step"], r["site"]) for r in parts] == [(r["step"], r["site"]) for r in whole]
    for a, b in zip(whole, parts, strict=True):
        for key, value in a.items():
            # sums over rows: equal up to the order of float32 additions
            if isinstance(value, float) or key in ("head_entropy", "mass", "sink_share"):
                assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
            else:
                assert b[key] == value, key


def test_micro_batch_outside_the_block_is_refused():
    with pytest.raises(RuntimeError, match="inside the `with Tracer"):
        Tracer().micro_batch()

"""DDP: each rank traces its shard, statistics are all-reduced, rank 0 writes (2 gloo processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import Tracer


@pytest.mark.slow
def test_two_process_gloo_run_matches_the_global_batch(tmp_path, torchrun):
    worker = Path(__file__).with_name("ddp_worker.py")
    done = torchrun(worker, tmp_path, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "rank0.jsonl").exists() and not (tmp_path / "rank1.jsonl").exists()
    h0 = json.loads((tmp_path / "history0.json").read_text())
    h1 = json.loads((tmp_path / "history1.json").read_text())
    assert h0 == h1
    assert [r["rows"] for r in h0] == [16.0, 16.0]

    # The reduced metrics equal a single process tracing the whole batch at the same parameters.
    saved = torch.load(tmp_path / "final.pt")
    torch.manual_seed(0)
    model = nn.Linear(6, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model) as tracer:
        for _ in range(2):
            F.cross_entropy(model(saved["x"]), saved["y"]).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    for got, want in zip(h0, tracer.history, strict=True):
        assert got["site"] == want["site"] == "ce"
        for key in ("mass", "entropy", "effective_k", "dominance", "wrong_entropy", "wrong_top"):
            torch.testing.assert_close(
                torch.tensor(got[key]), torch.tensor(want[key]), atol=1e-6, rtol=1e-5
            )
        assert got["residual"] <= 1e-5
    for p, q in zip(model.state_dict().values(), saved["state"].values(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)

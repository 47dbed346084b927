"""Capture per step, compute in batches: flushing every k measurements changes nothing."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em import objectives
from implicit_em.trace import CollapseWarning, Tracer

from .conftest import assert_same_parameters, train


def _model() -> nn.Module:
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(16 * 6, 3))


XS, YS = torch.randn(8, 6, 16), torch.randint(0, 3, (8,))
PROBE = torch.randn(4, 6, 16)


def _step(m: nn.Module) -> torch.Tensor:
    return F.cross_entropy(m(XS), YS)


def _assert_same(a: object, b: object, where: str) -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) or (
            math.isnan(a) and math.isnan(b)
        ), where
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y, where)
    else:
        assert a == b, where


def _assert_same_records(a: list[dict], b: list[dict]) -> None:
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for key in ra:
            _assert_same(ra[key], rb[key], f"{ra['site']} step {ra['step']} {key}")


@pytest.mark.parametrize("probe", [None, PROBE])
def test_flush_every_changes_no_record(probe):
    kwargs = {"every": 1, "probe": probe}
    m1, one = train(_model, _step, 9, {**kwargs, "flush_every": 1})
    m8, eight = train(_model, _step, 9, {**kwargs, "flush_every": 8})
    assert_same_parameters(m1, m8)
    a, b = one.history.records, eight.history.records
    assert [(r["kind"], r["step"], r["site"]) for r in a] == [
        (r["kind"], r["step"], r["site"]) for r in b
    ]
    assert {r["site"] for r in a} == {"0.layers.0.self_attn", "0.layers.1.self_attn", "2.ce"}
    _assert_same_records(a, b)


def test_records_reach_the_sinks_in_batches_of_flush_every():
    model = nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    with Tracer(model, flush_every=3) as tracer:
        for i in range(7):
            F.cross_entropy(model(x), y).backward()
            tracer.step()
            assert len(tracer.history) == 3 * ((i + 1) // 3)
    assert [r["step"] for r in tracer.history] == list(range(7))


def test_an_interrupted_run_writes_every_measured_step(tmp_path):
    path = tmp_path / "run.jsonl"
    model = nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    sinks = [f"jsonl:{path}"]
    with pytest.raises(KeyboardInterrupt), Tracer(model, sinks=sinks, flush_every=8) as tracer:
        for _ in range(5):
            F.cross_entropy(model(x), y).backward()
            model.zero_grad()
            tracer.step()
        F.cross_entropy(model(x), y).backward()
        raise KeyboardInterrupt
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "site"] == [0, 1, 2, 3, 4]


def test_chunked_statistics_change_no_record(monkeypatch):
    """Reducing a flush's stacked sites in chunks (here one site per chunk) gives the records
    of one batched pass."""
    import implicit_em.trace.flush as flush

    kwargs = {"every": 1, "flush_every": 8, "max_rows": 2, "probe": PROBE}
    _, whole = train(_model, _step, 9, kwargs)
    monkeypatch.setattr(flush, "_CHUNK_BYTES", 1)
    _, chunked = train(_model, _step, 9, kwargs)
    a, b = whole.history.records, chunked.history.records
    assert len(a) == len(b) and any(r.get("type") == "attention" for r in a)
    _assert_same_records(a, b)


def test_flush_bytes_is_ignored_with_a_warning():
    model = nn.Linear(4, 3)
    with pytest.warns(DeprecationWarning, match="flush_bytes"):
        Tracer(model, flush_bytes=1)


def test_alarms_reach_every_sink_at_their_step(tmp_path):
    """With site records buffered for 100 steps, each step's alarms are already in every sink
    and in `tracer.alarms` when its `step()` returns."""
    path = tmp_path / "run.jsonl"
    d = torch.tensor([[0.0, 30.0, 30.0]]).repeat(16, 1).requires_grad_()
    with (
        pytest.warns(CollapseWarning),
        Tracer(sinks=["memory", f"jsonl:{path}"], flush_every=100) as tracer,
    ):
        for step in range(3):
            objectives.mixture_nll(d).backward()
            tracer.step()
            written = [json.loads(line) for line in path.read_text().splitlines()]
            assert {r["step"] for r in written} == set(range(step + 1))
            assert all(r["kind"] == "alarm" for r in written)
            assert [a["step"] for a in tracer.alarms] == [a["step"] for a in written]
            assert tracer.history.alarms() == tracer.alarms
    assert "Usual remedy" in tracer.alarms[0]["message"]

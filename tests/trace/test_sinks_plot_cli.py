"""Sinks (memory, JSONL, TensorBoard), the standard figures and ``implicit-em trace-demo``."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from implicit_em import plot
from implicit_em.cli import app
from implicit_em.trace import History, Tracer, make_sink


def _run(tmp_path, steps: int = 4):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4))
    x, y = torch.randn(32, 5), torch.randint(0, 4, (32,))
    sinks = ["memory", f"jsonl:{tmp_path / 'run.jsonl'}", f"tensorboard:{tmp_path / 'tb'}"]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model, sinks=sinks, probe=lambda: F.cross_entropy(model(x[:8]), y[:8])) as tracer:
        for _ in range(steps):
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    return tracer


def test_jsonl_matches_memory_and_appends(tmp_path):
    tracer = _run(tmp_path)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == tracer.history.records
    _run(tmp_path)
    assert len((tmp_path / "run.jsonl").read_text().splitlines()) == 2 * len(lines)
    with (tmp_path / "run.jsonl").open("a") as f:
        f.write('{"kind": "site", "trunc')
    assert len(History.from_jsonl(tmp_path / "run.jsonl")) == 2 * len(lines)


def test_to_pandas(tmp_path):
    frame = _run(tmp_path).history.to_pandas()
    sites = frame[frame.kind == "site"]
    assert list(sites.step) == [0, 1, 2, 3]
    assert (sites.residual <= 1e-5).all()


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _run(tmp_path)
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = acc.Tags()
    assert "0.ce/effective_k" in tags["scalars"]
    assert "0.ce/mass" in tags["histograms"]
    assert [e.step for e in acc.Scalars("0.ce/residual")] == [0, 1, 2, 3]


def test_unknown_sink_is_rejected():
    with pytest.raises(ValueError, match="unknown sink"):
        make_sink("csv:out.csv")


def test_standard_figures_from_history_and_jsonl(tmp_path):
    pytest.importorskip("matplotlib")
    tracer = _run(tmp_path)
    paths = plot.standard_figures(tmp_path / "run.jsonl", tmp_path / "fig")
    assert sorted(p.name for p in paths) == ["churn.png", "effective_k.png", "mass_0.ce.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    with pytest.raises(ValueError, match="no recorded mass"):
        plot.responsibility_mass(tracer.history, "nowhere")


def test_two_timescales_figure(tmp_path):
    pytest.importorskip("matplotlib")
    layer = nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True)
    x = torch.randn(4, 5, 8)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    with Tracer(layer, probe=x[:2]) as tracer:
        for _ in range(3):
            layer(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    paths = plot.standard_figures(tracer.history, tmp_path)
    assert [p.name for p in paths] == ["two_timescales.png"]


@pytest.mark.slow
def test_trace_demo_cli(tmp_path):
    result = CliRunner().invoke(app, ["trace-demo", "--out", str(tmp_path), "--epochs", "1"])
    assert result.exit_code == 0, result.output
    assert "2.ce" in result.output and "residual" in result.output
    assert (tmp_path / "trace.jsonl").stat().st_size > 0
    assert any((tmp_path / "tb").iterdir())
    assert (tmp_path / "figures" / "effective_k.png").exists()

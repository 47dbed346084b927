"""`TracerCallback` in a real Lightning `Trainer(max_steps=...)` on CPU."""

from __future__ import annotations

import csv

import pytest
import torch
import torch.nn.functional as F
from torch import nn

L = pytest.importorskip("lightning")

from implicit_em.trace import History, Thresholds  # noqa: E402
from implicit_em.trace.integrations.lightning import TracerCallback  # noqa: E402


class _Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        return self.head(self.attn(h, h, h)[0].mean(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(n: int = 64) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(n, 5, 6, generator=g), torch.randint(0, 4, (n,), generator=g)
    )
    return torch.utils.data.DataLoader(data, batch_size=8)


def _fit(tmp_path, callback: TracerCallback, **kwargs) -> tuple:
    torch.manual_seed(0)
    logger = L.pytorch.loggers.CSVLogger(str(tmp_path), name="run", version=0)
    trainer = L.Trainer(
        accelerator="cpu",
        logger=logger,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(_Classifier(), _loader(), _loader(16))
    with open(tmp_path / "run" / "version_0" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("trace/alarms")]
    return trainer, rows, History.from_jsonl(tmp_path / "trace.jsonl")


def test_metrics_reach_the_logger_at_its_steps_and_validation_is_not_traced(tmp_path):
    callback = TracerCallback(sinks=[f"jsonl:{tmp_path / 'trace.jsonl'}"])
    trainer, rows, history = _fit(
        tmp_path, callback, max_steps=4, log_every_n_steps=2, val_check_interval=2
    )
    assert trainer.global_step == 4
    assert [int(r["step"]) for r in rows] == [1, 3]  # CSVLogger counts from 0
    assert float(rows[0]["trace/classification/residual/max"]) < 1e-4
    assert float(rows[0]["trace/attention/entropy/p50"]) > 0
    assert "trace/classification/worst/head.ce" in rows[0]
    sites = [r for r in history if r["kind"] == "site"]
    assert [(r["step"], r["site"]) for r in sites] == [
        (2, "attn"),
        (2, "head.ce"),
        (4, "attn"),
        (4, "head.ce"),
    ]
    assert all(r["source"] == "gradient" for r in sites if r["type"] == "classification")
    assert callback.monitor is None


def test_accumulation_and_stop_on_alarm(tmp_path):
    callback = TracerCallback(
        every=1,
        stop_on_alarm=True,
        thresholds=Thresholds(effective_k=1e9),
        sinks=[f"jsonl:{tmp_path / 'trace.jsonl'}"],
    )
    trainer, rows, history = _fit(
        tmp_path, callback, max_steps=5, accumulate_grad_batches=2, log_every_n_steps=1
    )
    assert trainer.global_step == 1
    assert [float(r["trace/alarms"]) >= 1 for r in rows] == [True]
    heads = [r for r in history if r["kind"] == "site" and r["type"] == "classification"]
    assert [(r["step"], r["rows"]) for r in heads] == [(1, 16.0)]
    assert any(a["alarm"] == "effective_k" for a in history.alarms())

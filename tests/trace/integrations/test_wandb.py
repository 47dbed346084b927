"""`WandbSink` in offline mode (no network): the run's file holds the summary and the alerts."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

wandb = pytest.importorskip("wandb")

from implicit_em.trace import Thresholds, Tracer, WandbSink  # noqa: E402


def _records(path: Path) -> list:
    """The protobuf records of an offline run's `.wandb` file (a LevelDB-style log: a 7-byte
    header, then 32 KiB blocks of chunks with a 7-byte header: CRC, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, pending, out = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):
            break  # a chunk still being written
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or its last chunk
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def _finished(path: Path, attempts: int = 300) -> list:
    """The records of an offline run once its file holds the `exit` record (W&B's service
    process may still be writing the file when `run.finish()` returns)."""
    for _ in range(attempts):
        records = _records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        time.sleep(0.1)
    raise AssertionError(f"{path} has no exit record")


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def test_offline_run_holds_the_summary_and_an_alert_per_alarm(offline):
    torch.manual_seed(0)
    model = nn.Linear(5, 4)
    x, y = torch.randn(16, 5), torch.randint(0, 4, (16,))
    with Tracer(model, sinks=["wandb:tracer-test"], thresholds=Thresholds(effective_k=1e9)) as t:
        for _ in range(3):
            F.cross_entropy(model(x), y).backward()
            model.zero_grad()
            t.step()
    (run_file,) = offline.glob("wandb/offline-run-*/run-*.wandb")
    records = _finished(run_file)
    history = [
        {item.nested_key[0]: item.value_json for item in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert [h["trace/step"] for h in history] == ["0", "1", "2"]
    assert float(history[0]["trace/classification/residual/max"]) < 1e-4
    assert float(history[0]["trace/alarms"]) == 1.0
    alerts = [r.alert for r in records if r.WhichOneof("record_type") == "alert"]
    assert len(alerts) == 3
    assert alerts[0].title == "effective_k at ce" and alerts[0].level == "WARN"
    assert "effective number of components collapsed" in alerts[0].text


def test_an_active_run_is_used_and_left_open(offline):
    run = wandb.init(project="tracer-test")
    sink = WandbSink()
    sink.close()
    assert sink.run is run and wandb.run is run
    run.finish()

"""Checkpoints hold tensors and plain data only: a file that would run code when loaded is refused
unread, by the library and by the CLI, and nothing of it runs."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.windtunnel.checkpoint import load_plain, save_atomic
from implicit_em.windtunnel.config import RunConfig
from implicit_em.windtunnel.train import CHECKPOINT, run

TINY = RunConfig(
    task="bijection",
    task_params={"n_symbols": 4},
    split_qkv=True,
    n_layer=1,
    n_head=2,
    n_embd=16,
    steps=12,
    batch_size=8,
    warmup=4,
    eval_every=6,
    ckpt_every=5,
    n_test=32,
)


class CreatesFile:
    """Unpickled, it calls `open(marker, "w")`: the file appears if its code ever runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def _plant(path: Path, marker: Path) -> None:
    """Replace the checkpoint at `path` by one whose model would create `marker` when unpickled."""
    state = torch.load(path, weights_only=True)
    state["model"] = CreatesFile(marker)
    torch.save(state, path)


def test_the_planted_payload_runs_when_unpickled(tmp_path: Path) -> None:
    # The control: the payload of the tests below is live, so their markers can appear.
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(CreatesFile(marker))).close()
    assert marker.exists()


def test_a_checkpoint_that_would_run_code_is_refused_unread(tmp_path: Path) -> None:
    run(TINY, tmp_path, progress=False, time_budget_s=0.0)
    marker = tmp_path / "ran"
    _plant(tmp_path / CHECKPOINT, marker)
    with pytest.raises(ValueError, match=r"checkpoint\.pt holds more than tensors") as err:
        run(TINY, tmp_path, progress=False)
    assert "\n" not in str(err.value) and str(tmp_path / CHECKPOINT) in str(err.value)
    assert "builtins.open" in str(err.value) or "io.open" in str(err.value)
    with pytest.raises(ValueError, match="holds more than tensors"):
        run(replace(TINY, freeze="rest", freeze_at=8), tmp_path / "branch", progress=False,
            branch_from=tmp_path / CHECKPOINT)  # fmt: skip
    assert not marker.exists()


def test_the_cli_refuses_such_a_checkpoint_with_exit_2(tmp_path: Path) -> None:
    args = ["windtunnel", "--task", "dice", "--quick", "--steps", "40", "--batch-size", "2"]
    args += ["--ckpt-every", "5", "--out", str(tmp_path), "--time-budget", "1e-9"]
    stopped = CliRunner().invoke(app, args)
    assert stopped.exit_code == 0 and "Rerun the same command to resume" in stopped.output
    (checkpoint,) = tmp_path.glob("*/" + CHECKPOINT)
    marker = tmp_path / "ran"
    _plant(checkpoint, marker)
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"error: {checkpoint} holds more than tensors")
    assert not marker.exists()


def test_an_unreadable_file_is_refused_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.pt is not a readable torch file"):
        load_plain(empty)
    truncated = tmp_path / "truncated.pt"
    torch.save({"w": torch.ones(64)}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"truncated\.pt is not a readable torch file"):
        load_plain(truncated)


def test_saving_anything_but_plain_data_is_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    with pytest.raises(TypeError, match=r"the state\['history'\]\[1\] is a float64"):
        save_atomic({"history": [1.0, np.float64(2.0)]}, path)
    assert not path.exists() and not list(tmp_path.iterdir())
    plain = {"w": torch.arange(3), "rng": torch.Generator().get_state(), "t": (1, 2.5, "a", None)}
    save_atomic(plain, path)
    loaded = load_plain(path)
    assert torch.equal(loaded["w"], plain["w"]) and loaded["t"] == plain["t"]

"""The grid reuses the CLI's runs when the configuration matches."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.windtunnel.grid import run_configs, run_grid
from implicit_em.windtunnel.train import preset


def test_grid_reuses_the_runs_of_the_cli(tmp_path: Path) -> None:
    args = ["windtunnel", "--task", "dice", "--quick", "--steps", "3", "--batch-size", "2"]
    out = CliRunner().invoke(app, [*args, "--model", "mlp-pos", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    (directory,) = tmp_path.iterdir()
    written = (directory / "result.json").stat().st_mtime_ns
    base = preset("dice", "quick", steps=3, batch_size=2)
    threads = torch.get_num_threads()
    results = run_grid(base, "quick", tmp_path, [0], models=["mlp-pos"], objectives=["ce"])
    assert torch.get_num_threads() == threads  # restored
    assert list(tmp_path.iterdir()) == [directory]  # nothing new was trained
    assert (directory / "result.json").stat().st_mtime_ns == written
    assert results[("mlp-pos", "ce", 0)]["steps"] == 3


def _timeless(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("wall_time_s", "threads")}


def test_two_workers_give_the_results_of_one(tmp_path: Path) -> None:
    base = preset("dice", "quick", steps=4, batch_size=2, n_test=8, n_layer=1, n_embd=16)
    configs = [replace(base, seed=s) for s in (0, 1, 2)]
    one = run_configs(configs, "t", tmp_path / "one")
    two = run_configs(configs, "t", tmp_path / "two", workers=2)
    assert [_timeless(r) for r in one] == [_timeless(r) for r in two]
    assert [r["config"]["seed"] for r in two] == [0, 1, 2]  # in the order given

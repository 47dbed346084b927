"""Freezing one part at step t: the KL fraction, the earliest sufficient freeze, a real run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from implicit_em.windtunnel.config import RunConfig
from implicit_em.windtunnel.grid import worker_pool
from implicit_em.windtunnel.interventions import (
    kl_fraction,
    run_interventions,
    sufficient_freeze_step,
)

BASE = RunConfig(
    task="bijection",
    task_params={"n_symbols": 4, "n_pairs": 3},
    n_layer=1,
    n_head=2,
    n_embd=16,
    split_qkv=True,
    schedule="constant",
    steps=40,
    batch_size=16,
    warmup=4,
    lr=3e-3,
    eval_every=10,
    ckpt_every=20,
    n_test=64,
)


def test_kl_fraction_is_the_share_of_the_full_improvement() -> None:
    assert kl_fraction(2.0, 0.0, 1.0) == 0.5
    assert kl_fraction(2.0, 1.0, 1.0) == 1.0
    assert kl_fraction(2.0, 1.0, 2.5) == -0.5  # a branch that got worse than at step 0
    with pytest.raises(ValueError, match="did not improve"):
        kl_fraction(1.0, 1.0, 0.5)


def test_sufficient_freeze_step_needs_every_later_step_to_reach_the_level() -> None:
    ts = [10, 20, 30, 40]
    assert sufficient_freeze_step(ts, [0.5, 0.95, 0.92, 0.99]) == 20
    assert sufficient_freeze_step(ts, [0.95, 0.5, 0.92, 0.99]) == 30
    assert sufficient_freeze_step(ts, [0.95, 0.95, 0.95, 0.5]) is None
    assert sufficient_freeze_step(ts, [float("nan"), 0.95, 0.95, 0.95]) == 20


def test_interventions_on_a_tiny_run(tmp_path: Path) -> None:
    out = run_interventions(BASE, [10, 30], tmp_path, "test", snapshot_every=10)
    assert out["freeze_at"] == [10, 30] and out["steps"] == 40
    for part in ("routing", "rest"):
        assert len(out[f"kl_{part}_frozen"]) == 2
        for kl, f in zip(out[f"kl_{part}_frozen"], out[f"fraction_{part}_frozen"], strict=True):
            assert f == pytest.approx(kl_fraction(out["kl_initial"], out["kl_full"], kl))
    remaining = out["remaining"]
    assert remaining["steps"] == [0, 10, 20, 30, 40]
    for part in ("routing", "values", "rest"):
        assert remaining[part][0] == pytest.approx(1.0) and remaining[part][-1] == 0.0
        assert out["t90"][part] in remaining["steps"]
    # Rerunning reuses every finished run.
    assert run_interventions(BASE, [10, 30], tmp_path, "test", snapshot_every=10) == out


def test_interventions_refuse_what_they_cannot_compare(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split_qkv"):
        run_interventions(replace(BASE, split_qkv=False), [10], tmp_path, "x")
    with pytest.raises(ValueError, match="strictly inside"):
        run_interventions(BASE, [40], tmp_path, "x")
    with pytest.raises(ValueError, match="stop_at_plateau"):
        run_interventions(replace(BASE, stop_at_plateau=True), [10], tmp_path, "x")


@pytest.mark.slow
def test_branches_in_worker_processes_give_the_same_numbers(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the workers: sums in another order differ in the last bits
    try:
        one = run_interventions(BASE, [20], tmp_path / "one", "t")
        with worker_pool(2) as pool:
            two = run_interventions(BASE, [20], tmp_path / "two", "t", pool=pool)
    finally:
        torch.set_num_threads(threads)
    drop = ("wall_time_s",)
    assert {k: v for k, v in one.items() if k not in drop} == {
        k: v for k, v in two.items() if k not in drop
    }

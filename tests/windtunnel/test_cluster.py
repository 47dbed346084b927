"""Wind-tunnel runs as Ray tasks (`RayPool`) on a real local Ray instance: the same results as
one after another in this process, in the order given, and finished runs read back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from implicit_em.windtunnel.cluster import RayPool
from implicit_em.windtunnel.grid import run_configs
from implicit_em.windtunnel.train import preset


def _timeless(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("wall_time_s", "threads")}


@pytest.mark.slow
def test_runs_on_ray_give_the_results_of_one_process(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    base = preset("dice", "quick", steps=4, batch_size=2, n_test=8, n_layer=1, n_embd=16)
    configs = [
        replace(base, seed=s, model=m) for s in (0, 1) for m in ("transformer", "mlp-prefix")
    ]
    here = run_configs(configs, "t", tmp_path / "here")
    with RayPool(num_cpus=2) as pool:
        there = run_configs(configs, "t", tmp_path / "ray", pool=pool)
        written = sorted(p.name for p in (tmp_path / "ray").iterdir())
        again = run_configs(configs, "t", tmp_path / "ray", pool=pool)  # read back, not trained
    assert [_timeless(r) for r in there] == [_timeless(r) for r in here]
    assert [(r["config"]["seed"], r["config"]["model"]) for r in there] == [
        (c.seed, c.model) for c in configs
    ]
    assert len(written) == len(configs)
    assert [r["wall_time_s"] for r in again] == [r["wall_time_s"] for r in there]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cpus_per_run": 0}, "cpus_per_run must be >= 1, got 0"),
        ({"gpus_per_run": -1}, "gpus_per_run must be >= 0, got -1"),
    ],
)
def test_a_bad_request_is_refused_before_ray_starts(options, message) -> None:
    with pytest.raises(ValueError, match=message):
        RayPool(**options)


@pytest.mark.slow
def test_a_run_no_node_can_hold_is_refused_at_once() -> None:
    """A CPU-only instance asked for a GPU per run: refused in one line naming the request,
    and the instance the pool started is stopped (a task would otherwise wait forever)."""
    ray = pytest.importorskip("ray")
    with pytest.raises(ValueError, match=r"gpus_per_run=1: no live node has GPU 1 \(the largest"):
        RayPool(gpus_per_run=1, num_cpus=1)
    assert not ray.is_initialized()

"""Seeds trained together: each seed equals its run alone; resumption; weights_only checkpoints."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.windtunnel.config import RunConfig
from implicit_em.windtunnel.seeds import seed_dir, train_seeds
from implicit_em.windtunnel.seeds_checkpoint import SEEDS_CHECKPOINT, SEEDS_STATE
from implicit_em.windtunnel.stacked_optim import StackedAdamW, clip_per_seed
from implicit_em.windtunnel.train import run

TINY = RunConfig(
    task="dice",
    task_params={"n_faces": 3, "length": 6},
    n_layer=1,
    n_head=2,
    n_embd=16,
    norm="rmsnorm",
    steps=24,
    batch_size=8,
    warmup=4,
    eval_every=6,
    ckpt_every=5,
    n_test=32,
)
SEEDS = [0, 3, 5]


def _comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A result without what depends on the wall clock and the number of sessions."""
    return {k: v for k, v in result.items() if k not in ("wall_time_s", "sessions")}


def _assert_same_run(a: Any, b: Any, where: str = "result") -> None:
    """`a` and `b` are the same run: the same keys, steps, statuses and plateau decisions, and
    every float equal to float32 rounding (relative 1e-5, absolute 1e-6: the plateau's relative
    improvement is a difference of two held-out errors). Stacked seeds run
    their linear layers as one batched matmul, which some CPUs (AMD EPYC, not Intel Xeon) sum
    in another order than a run alone's single matmul, so bit-for-bit equality is the CPU's
    choice and not the stack's property."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _assert_same_run(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_run(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, float | int):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize(
    "config",
    [
        TINY,
        replace(TINY, model="mlp-prefix", objective="sigmoid"),
        replace(
            TINY,
            model="mlp-pos",
            objective="brier",
            targets="sample",
            task="bijection",
            task_params={"n_symbols": 4},
        ),
        replace(TINY, split_qkv=True, value_lr_mult=3.0, freeze="routing", freeze_at=10),
        replace(TINY, sdpa=False, objective="softmax-brier", schedule="constant"),
    ],
    ids=["transformer", "mlp-prefix", "mlp-pos-bijection", "split-frozen", "eager-attention"],
)
def test_each_seed_equals_its_run_alone(tmp_path: Path, config: RunConfig) -> None:
    together = train_seeds(config, SEEDS, tmp_path / "together", progress=False)
    for seed, result in zip(SEEDS, together, strict=True):
        alone = run(replace(config, seed=seed), tmp_path / f"alone-{seed}", progress=False)
        _assert_same_run(_comparable(result), _comparable(alone))
    assert together[0]["history"]["loss"] != together[1]["history"]["loss"]


def test_seeds_that_stop_at_their_own_plateaus_equal_their_runs_alone(tmp_path: Path) -> None:
    """`"wsd"` with `stop_at_plateau`: each seed decays from its own plateau (its own rates)
    and leaves the stack at its own step."""
    config = replace(
        TINY,
        model="mlp",
        steps=300,
        eval_every=10,
        ckpt_every=10,
        schedule="wsd",
        stop_at_plateau=True,
        plateau_tol=0.1,
        min_steps=20,
    )
    seeds = [0, 1, 2, 3]
    together = train_seeds(config, seeds, tmp_path / "together", progress=False)
    for seed, result in zip(seeds, together, strict=True):
        alone = run(replace(config, seed=seed), tmp_path / f"alone-{seed}", progress=False)
        _assert_same_run(_comparable(result), _comparable(alone))
    assert len({r["plateau"]["decay_from"] for r in together}) > 1  # the seeds' rates differ
    assert len({r["steps"] for r in together}) > 1  # and they stop at different steps


def test_layernorm_seeds_equal_their_runs_alone_to_float_tolerance(tmp_path: Path) -> None:
    """vmap's LayerNorm backward sums in another order: equal to float tolerance only."""
    config = replace(TINY, norm="layernorm")
    together = train_seeds(config, SEEDS, tmp_path / "together", progress=False)
    for seed, result in zip(SEEDS, together, strict=True):
        alone = run(replace(config, seed=seed), tmp_path / f"alone-{seed}", progress=False)
        for key in ("loss", "eval_kl", "eval_bits_mae"):
            for a, b in zip(alone["history"][key], result["history"][key], strict=True):
                assert math.isclose(a, b, rel_tol=1e-5)
        assert math.isclose(alone["kl_bits"], result["kl_bits"], rel_tol=1e-5)


def test_an_interrupted_stack_resumes_to_the_uninterrupted_results(tmp_path: Path) -> None:
    straight = train_seeds(TINY, SEEDS, tmp_path / "straight", progress=False)
    stopped = []
    while True:
        results = train_seeds(TINY, SEEDS, tmp_path / "pieces", progress=False, time_budget_s=0.0)
        if all(r["status"] == "complete" for r in results):
            break
        assert {r["status"] for r in results} == {"interrupted"}
        stopped.append(results[0]["steps"])
    assert stopped == list(range(1, TINY.steps))  # a zero budget stops after every single step
    for a, b in zip(straight, results, strict=True):
        assert _comparable(a) == _comparable(b)
        assert b["sessions"] == TINY.steps


def test_the_checkpoint_loads_with_weights_only(tmp_path: Path) -> None:
    train_seeds(TINY, SEEDS, tmp_path, progress=False, time_budget_s=0.0)
    saved = torch.load(tmp_path / SEEDS_CHECKPOINT, weights_only=True)
    assert saved["progress"][0]["step"] == 1
    assert all(p.shape[0] == len(SEEDS) for p in saved["params"].values())
    meta = json.loads((tmp_path / SEEDS_STATE).read_text())
    assert meta["seeds"] == SEEDS and "seed" not in meta["config"]


def test_finished_seeds_are_reloaded_and_read_by_run(tmp_path: Path) -> None:
    first = train_seeds(TINY, SEEDS, tmp_path, progress=False)
    assert train_seeds(TINY, SEEDS[::-1], tmp_path, progress=False) == first[::-1]
    assert run(replace(TINY, seed=3), seed_dir(tmp_path, 3), progress=False) == first[1]
    more = train_seeds(TINY, [*SEEDS, 7], tmp_path, progress=False)  # only seed 7 trains
    assert more[:3] == first
    alone = run(replace(TINY, seed=7), tmp_path / "alone", progress=False)
    _assert_same_run(_comparable(more[3]), _comparable(alone))


def test_another_configuration_or_other_seeds_are_refused(tmp_path: Path) -> None:
    train_seeds(TINY, SEEDS, tmp_path, progress=False, time_budget_s=0.0)
    with pytest.raises(ValueError, match=r"differs in: lr\)"):
        train_seeds(replace(TINY, lr=0.5), SEEDS, tmp_path, progress=False)
    with pytest.raises(ValueError, match="trains seeds"):
        train_seeds(TINY, [0, 3], tmp_path, progress=False)
    with pytest.raises(ValueError, match="distinct"):
        train_seeds(TINY, [1, 1], tmp_path, progress=False)


def test_clipping_is_per_seed() -> None:
    small = torch.full((1, 4), 0.1)
    large = torch.full((1, 4), 10.0)
    grads = {"w": torch.cat([small, large])}
    norms = clip_per_seed(grads, 1.0)
    assert torch.allclose(norms, torch.tensor([0.2, 20.0]))
    assert torch.equal(grads["w"][0], small[0])  # under the threshold: untouched
    assert math.isclose(grads["w"][1].norm().item(), 1.0, rel_tol=1e-5)


def test_adamw_gives_each_seed_its_own_rate() -> None:
    params = {"w": torch.ones(2, 3)}
    optimizer = StackedAdamW(params, {"w": "all"})
    optimizer.step(params, {"w": torch.ones(2, 3)}, {"all": [0.1, 0.0]}, {"all": 0.0})
    assert torch.allclose(params["w"][0], torch.full((3,), 0.9))  # Adam's first step is lr
    assert torch.equal(params["w"][1], torch.ones(3))  # rate 0: unmoved


def test_cli_trains_seeds_together_as_one_run_each(tmp_path: Path) -> None:
    common = [
        "windtunnel",
        "--task",
        "bijection",
        "--quick",
        "--norm",
        "rmsnorm",
        "--steps",
        "3",
        "--batch-size",
        "2",
    ]
    together = CliRunner().invoke(
        app, [*common, "--seed", "4", "--seeds", "2", "--out", str(tmp_path / "a")]
    )
    assert together.exit_code == 0, together.output
    alone = CliRunner().invoke(app, [*common, "--seed", "5", "--out", str(tmp_path / "b")])
    assert alone.exit_code == 0, alone.output
    (folder,) = (tmp_path / "a").iterdir()
    assert folder.name.startswith("bijection-transformer-ce-quick-seeds4-5-")
    (single,) = (tmp_path / "b").iterdir()
    a = json.loads((seed_dir(folder, 5) / "result.json").read_text())
    b = json.loads((single / "result.json").read_text())
    _assert_same_run(_comparable(a), _comparable(b))
    assert (folder / "positions.png").exists()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--seeds", "2", "--compare"], "--seeds"),
        (["--seeds", "2", "--trace"], "--seeds"),
        (["--compile"], "--compile"),
        (["--seeds", "0"], "--seeds"),
    ],
)
def test_cli_bad_seeds_name_the_option(tmp_path: Path, args: list[str], option: str) -> None:
    out = CliRunner().invoke(app, ["windtunnel", *args, "--out", str(tmp_path)])
    assert out.exit_code == 2
    assert option in out.output
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_the_compiled_forward_trains_the_same_seeds_to_float_tolerance(tmp_path: Path) -> None:
    eager = train_seeds(TINY, SEEDS, tmp_path / "eager", progress=False)
    compiled = train_seeds(TINY, SEEDS, tmp_path / "compiled", progress=False, compile=True)
    for a, b in zip(eager, compiled, strict=True):
        for key in ("loss", "eval_kl"):
            for x, y in zip(a["history"][key], b["history"][key], strict=True):
                assert math.isclose(x, y, rel_tol=1e-4)

"""The runner: schedule, objectives, checkpoints, resumption after interruption or kill, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.windtunnel.cli import compare_table
from implicit_em.windtunnel.config import RunConfig, build_model, preset
from implicit_em.windtunnel.evaluation import plateau
from implicit_em.windtunnel.losses import (
    UNNORMALIZED,
    loss_fn,
    sigmoid_linear,
    softmax_brier,
    softmax_linear,
)
from implicit_em.windtunnel.models import count_parameters
from implicit_em.windtunnel.optim import learning_rate
from implicit_em.windtunnel.tasks import Bijection
from implicit_em.windtunnel.train import CHECKPOINT, run, state_path

TINY = RunConfig(
    task="dice",
    task_params={"n_faces": 3, "length": 6},
    n_layer=1,
    n_head=2,
    n_embd=16,
    steps=24,
    batch_size=8,
    warmup=4,
    eval_every=6,
    ckpt_every=5,
    n_test=32,
)
_TIMING = ("wall_time_s", "sessions")


def _comparable(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in _TIMING}


def test_loss_fn_matches_the_core_objectives_by_hand() -> None:
    task = Bijection(4)
    batch = task.sample(3, torch.Generator().manual_seed(0))
    logits = torch.randn(3, task.seq_len, task.n_classes)
    z, y, p = logits[batch.mask], batch.target[batch.mask], batch.posterior[batch.mask].float()
    ce_hard = torch.nn.functional.cross_entropy(z, y)
    ce_soft = -(p * torch.log_softmax(z, -1)).sum(-1).mean()
    onehot = torch.nn.functional.one_hot(y, task.n_classes).float()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, onehot, reduction="sum") / len(y)
    torch.testing.assert_close(loss_fn(logits, batch, "ce", "sample"), ce_hard)
    torch.testing.assert_close(loss_fn(logits, batch, "ce", "posterior"), ce_soft)
    torch.testing.assert_close(loss_fn(logits, batch, "sigmoid", "sample"), bce)
    brier = ((torch.sigmoid(z) - onehot) ** 2).sum(-1).mean()
    brier_soft = ((torch.sigmoid(z) - p) ** 2).sum(-1).mean()
    torch.testing.assert_close(loss_fn(logits, batch, "brier", "sample"), brier)
    torch.testing.assert_close(loss_fn(logits, batch, "brier", "posterior"), brier_soft)
    softmax_brier = ((torch.softmax(z, -1) - onehot) ** 2).sum(-1).mean()
    torch.testing.assert_close(loss_fn(logits, batch, "softmax-brier", "sample"), softmax_brier)
    linear = -(torch.softmax(z, -1) * onehot).sum(-1).mean()
    torch.testing.assert_close(loss_fn(logits, batch, "softmax-linear", "sample"), linear)
    absolute = (torch.sigmoid(z) - onehot).abs().sum(-1).mean()
    torch.testing.assert_close(loss_fn(logits, batch, "sigmoid-linear", "sample"), absolute)
    # With a soft target, the absolute error expected over the answer drawn from it.
    absolute_soft = (p * (1 - torch.sigmoid(z)) + (1 - p) * torch.sigmoid(z)).sum(-1).mean()
    torch.testing.assert_close(loss_fn(logits, batch, "sigmoid-linear", "posterior"), absolute_soft)


def test_softmax_brier_is_minimized_by_the_posterior() -> None:
    p = torch.tensor([[0.6, 0.3, 0.1]], dtype=torch.float64)
    expected = lambda d: sum(  # noqa: E731
        p[0, y] * softmax_brier(d, torch.tensor([y])) for y in range(3)
    )
    at_posterior = expected(-p.log())
    for shift in (torch.tensor([[0.3, -0.1, 0.0]]), torch.tensor([[-0.5, 0.5, 0.2]])):
        assert expected(-p.log() + shift) > at_posterior


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.05, 1.0), min_size=3, max_size=6))
def test_the_improper_losses_prefer_the_argmax_to_the_posterior(weights: list[float]) -> None:
    p = torch.tensor([weights], dtype=torch.float64)
    p = p / p.sum()
    assume(float(p.max()) < 0.99 and float(p.max() - p.topk(2).values[0, 1]) > 1e-3)
    k = p.shape[-1]

    def expected(loss, d: torch.Tensor) -> float:
        return float(sum(p[0, y] * loss(d, torch.tensor([y])) for y in range(k)))

    sharp = torch.full_like(p, 30.0)
    sharp[0, p.argmax()] = -30.0  # distances: the argmax near 0, every other answer far
    # The linear score: the one-hot argmax beats the posterior itself.
    assert expected(softmax_linear, sharp) < expected(softmax_linear, -p.log())
    # The absolute error: sigma_k = 1[p_k > 1/2] beats sigma_k = p_k.
    step = torch.where(p > 0.5, -30.0, 30.0)
    assert expected(sigmoid_linear, step) < expected(sigmoid_linear, -torch.logit(p))


def test_presets_and_validation() -> None:
    paper = preset("bijection", "paper")
    assert paper.task_params == {"n_symbols": 20}
    assert (paper.n_layer, paper.n_embd, paper.steps) == (6, 192, 100_000)
    assert preset("hmm").targets == "posterior" == preset("dice").targets
    assert preset("bijection").targets == "sample" == preset("bijection", "reference").targets
    assert preset("bijection", "quick", steps=7).steps == 7
    with pytest.raises(ValueError, match="unknown scale 'huge'"):
        preset("bijection", "huge")
    with pytest.raises(ValueError, match="objective"):
        RunConfig(objective="mse")
    with pytest.raises(ValueError, match="schedule"):
        RunConfig(schedule="linear")
    with pytest.raises(ValueError, match="freeze needs"):
        RunConfig(freeze="routing")
    with pytest.raises(ValueError, match="plateau_window"):
        RunConfig(plateau_window=1.0)
    with pytest.raises(ValueError, match="model must be one of"):
        RunConfig(model="lstm")
    with pytest.raises(ValueError, match="norm"):
        RunConfig(norm="batchnorm")
    with pytest.raises(ValueError, match="split_qkv"):
        RunConfig(value_lr_mult=10.0)
    assert RunConfig(model="mlp").model == "mlp-prefix"  # the old name still works


def test_reference_presets_state_the_protocol() -> None:
    ref = preset("bijection", "reference")
    assert ref.task_params == {"n_symbols": 20, "n_pairs": 19, "replacement": False}
    assert (ref.n_layer, ref.n_head, ref.n_embd, ref.norm) == (6, 6, 192, "rmsnorm")
    assert (ref.batch_size, ref.lr, ref.warmup, ref.weight_decay, ref.grad_clip) == (
        128,
        3e-4,
        2000,
        0.1,
        1.0,
    )
    assert ref.steps == 100_000 and ref.targets == "sample"
    cpu = preset("bijection", "reference-cpu")
    assert cpu.task_params == ref.task_params and cpu.targets == "sample"
    assert cpu.norm == "rmsnorm" and cpu.n_embd < ref.n_embd
    hmm = preset("hmm", "reference")
    assert hmm.task_params == {
        "n_states": 5,
        "n_observations": 5,
        "length": 20,
        "levels": 100,
        "floor": 5,
        "markers": True,
    }
    assert hmm.targets == "posterior" and hmm.make_task().seq_len == 93
    # the HMM's own protocol, not the bijection's: 9 x 256 with LayerNorm, batch 64,
    # 50 epochs of 10k sequences (7,850 steps), lr 3e-4 cosine to zero without warmup
    assert (hmm.n_layer, hmm.n_head, hmm.n_embd, hmm.norm) == (9, 8, 256, "layernorm")
    assert (hmm.batch_size, hmm.steps, hmm.lr, hmm.warmup, hmm.weight_decay) == (
        64,
        7850,
        3e-4,
        0,
        0.01,
    )
    assert (hmm.schedule, hmm.min_lr_ratio) == ("cosine", 0.0)
    budget = preset("bijection", "reference-budget")
    assert (budget.n_layer, budget.n_embd, budget.steps, budget.batch_size) == (2, 64, 100_000, 128)
    assert (budget.lr, budget.warmup, budget.min_lr_ratio, budget.stop_at_plateau) == (
        3e-4,
        2000,
        0.0,
        False,
    )
    assert budget.plateau_floor_tol <= 0.0005 and budget.plateau_tol == 0.0
    assert cpu.make_task().context_free_bits == pytest.approx(1.107, abs=5e-4)


def test_every_mlp_is_capacity_matched_at_the_reference_scales() -> None:
    for scale in ("reference", "reference-cpu"):
        config = preset("bijection", scale)
        t = config.make_task()
        n_tf = count_parameters(build_model(config, t))
        for model in ("mlp-prefix", "mlp-pos"):
            n_mlp = count_parameters(build_model(replace(config, model=model), t))
            assert abs(n_mlp - n_tf) <= 0.05 * n_tf, (scale, model)
    ref = preset("bijection", "reference")
    pos = build_model(replace(ref, model="mlp-pos"), ref.make_task())
    assert len(pos.blocks) == 9  # 9 blocks of width 192 against 6 layers, as published


def test_values_train_at_their_own_learning_rate(tmp_path: Path) -> None:
    config = replace(TINY, task="bijection", task_params={"n_symbols": 4}, split_qkv=True, steps=3)
    fast = replace(config, value_lr_mult=10.0)
    a, b = (build_model(c, c.make_task()) for c in (config, fast))
    run(config, tmp_path / "one", progress=False)
    run(fast, tmp_path / "two", progress=False)
    sa = torch.load(tmp_path / "one" / CHECKPOINT, weights_only=True)
    sb = torch.load(tmp_path / "two" / CHECKPOINT, weights_only=True)
    lrs_a = [g["lr"] for g in sa["optimizer"]["param_groups"]]
    lrs_b = [g["lr"] for g in sb["optimizer"]["param_groups"]]
    parts = [g["part"] for g in sb["optimizer"]["param_groups"]]
    assert parts == [g["part"] for g in sa["optimizer"]["param_groups"]]
    assert parts == ["routing", "values", "rest"]
    assert lrs_b[1] == pytest.approx(10 * lrs_b[0]) and lrs_b[0] == pytest.approx(lrs_a[0])
    assert lrs_a[1] == pytest.approx(lrs_a[0])
    assert count_parameters(a) == count_parameters(b)


def test_mlp_is_capacity_matched_in_every_preset() -> None:
    for task in ("bijection", "hmm", "dice"):
        for scale in ("quick", "default"):
            config = preset(task, scale)
            t = config.make_task()
            n_tf = count_parameters(build_model(config, t))
            for model in ("mlp-prefix", "mlp-pos"):
                n_mlp = count_parameters(build_model(replace(config, model=model), t))
                assert abs(n_mlp - n_tf) <= 0.1 * n_tf


@pytest.mark.parametrize(
    "objective", ["ce", "softmax-brier", "sigmoid", "brier", "softmax-linear", "sigmoid-linear"]
)
def test_result_contents(tmp_path: Path, objective: str) -> None:
    config = replace(TINY, objective=objective, model="mlp")
    result = run(config, tmp_path, progress=False)
    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert on_disk == json.loads(json.dumps(result))
    assert result["status"] == "complete" and result["steps"] == TINY.steps
    assert result["n_parameters"] > 0 and result["wall_time_s"] > 0
    assert result["bits_mae"] >= 0 and result["kl_bits"] >= 0
    assert len(result["per_position"]["entropy_mae"]) == TINY.task_params["length"]
    assert result["history"]["eval_step"] == [0, 6, 12, 18, 24]
    assert isinstance(result["converged"], bool)
    assert result["plateau"]["since"] == 18  # the last evaluation at or before 0.8 x 24 steps
    if objective not in UNNORMALIZED:
        assert result["sigma_sum_gap"] is None
    else:
        assert 0 <= result["sigma_sum_gap"] < TINY.task_params["n_faces"]
    # A finished run is returned as it is, without training again.
    assert run(config, tmp_path, progress=False) == on_disk


def test_interrupted_run_resumes_to_the_same_result(tmp_path: Path) -> None:
    straight = run(TINY, tmp_path / "straight", progress=False)
    pieces, stopped = 0, []
    while True:
        result = run(TINY, tmp_path / "pieces", progress=False, time_budget_s=0.0)
        pieces += 1
        if result["status"] == "complete":
            break
        stopped.append(result["steps"])
    assert stopped == list(range(1, TINY.steps))  # a zero budget stops after every single step
    assert result["sessions"] == pieces == TINY.steps
    assert _comparable(result) == _comparable(straight)
    a = torch.load(tmp_path / "straight" / CHECKPOINT, weights_only=True)["model"]
    b = torch.load(tmp_path / "pieces" / CHECKPOINT, weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_of_another_configuration_is_refused(tmp_path: Path) -> None:
    run(TINY, tmp_path, progress=False, time_budget_s=0.0)
    with pytest.raises(ValueError, match=r"differs in: lr, task_params.length\)"):
        run(
            replace(TINY, lr=0.5, task_params={"n_faces": 3, "length": 7}),
            tmp_path,
            progress=False,
        )
    before = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert before["config"]["lr"] == TINY.lr  # the refused run wrote nothing


def test_finished_run_of_another_configuration_is_refused(tmp_path: Path) -> None:
    run(replace(TINY, steps=2), tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"differs in: steps\)"):
        run(replace(TINY, steps=3), tmp_path, progress=False)


def _cli(out: Path) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from implicit_em.cli import main; main()",
        "windtunnel",
        "--task",
        "dice",
        "--quick",
        "--steps",
        "300",
        "--batch-size",
        "2",
        "--ckpt-every",
        "5",
        "--threads",
        "1",
        "--out",
        str(out),
    ]


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_killed_cli_run_resumes_to_the_uninterrupted_result(tmp_path: Path, sig: int) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _cli(tmp_path / "killed"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    run_dirs = tmp_path / "killed"
    deadline = time.monotonic() + 60
    while not list(run_dirs.glob("*/" + CHECKPOINT)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(sig)
    output = proc.communicate(timeout=60)[0].decode()
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "Rerun the same command to resume" in output
    else:
        assert proc.returncode == -signal.SIGKILL
    (directory,) = run_dirs.iterdir()
    assert not (directory / "result.json").exists()
    stopped_at = torch.load(directory / CHECKPOINT, weights_only=True)["step"]
    assert 0 < stopped_at < 300
    resumed = subprocess.run(_cli(run_dirs), env=env, capture_output=True, check=True)
    assert b"bits MAE" in resumed.stdout
    a = json.loads((directory / "result.json").read_text())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the CLI runs
    try:
        config = preset("dice", "quick", steps=300, batch_size=2, ckpt_every=5)
        b = run(config, tmp_path / "straight", progress=False)
    finally:
        torch.set_num_threads(threads)
    assert a["config"] == b["config"]
    assert a["sessions"] == 2 and b["sessions"] == 1
    assert _comparable(a) == _comparable(b)


def test_cli_compare_prints_the_table_and_writes_figures(tmp_path: Path) -> None:
    args = [
        "windtunnel",
        "--task",
        "bijection",
        "--quick",
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--compare",
        "--out",
        str(tmp_path),
    ]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    header = next(line for line in lines if line.startswith("model"))
    assert header.split() == [
        "model",
        "CE",
        "MAE",
        "CE",
        "KL",
        "sigm",
        "MAE",
        "sigm",
        "KL",
        "params",
    ]
    for row in ("transformer", "mlp-prefix", "mlp-pos"):
        assert sum(line.startswith(row + " ") for line in lines) == 1
    assert "context-free floor" in out.output
    runs = [p for p in tmp_path.iterdir() if (p / "result.json").exists()]
    assert len(runs) == 6
    for p in runs:
        assert (p / "positions.png").stat().st_size > 0 and (p / "training.png").stat().st_size > 0
    (figures,) = tmp_path.glob("bijection-compare-*")
    assert (figures / "positions.png").exists() and (figures / "table.txt").exists()


def test_compare_table_rows_and_columns() -> None:
    def cell(mae: float, kl: float, n: int) -> dict:
        return {"bits_mae": mae, "kl_bits": kl, "n_parameters": n}

    results = {
        ("transformer", "ce"): cell(0.01, 0.002, 1000),
        ("transformer", "sigmoid"): cell(0.03, 0.004, 1000),
        ("mlp-prefix", "ce"): cell(0.5, 0.2, 1010),
        ("mlp-prefix", "sigmoid"): cell(0.6, 0.3, 1010),
        ("mlp-pos", "ce"): cell(1.1, 1.2, 990),
        ("mlp-pos", "sigmoid"): cell(1.3, 1.4, 990),
    }
    rows = compare_table(results, floor=1.1073).splitlines()
    assert rows[2].split() == ["transformer", "0.0100", "0.0020", "0.0300", "0.0040", "1,000"]
    assert rows[4].split() == ["mlp-pos", "1.1000", "1.2000", "1.3000", "1.4000", "990"]
    assert rows[5].startswith("context-free floor 1.1073 bits")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--n-pairs", "25"], "--n-pairs"),
        (["--symbols", "1", "--n-pairs", "1"], "--symbols"),
        (["--model", "lstm"], "--model"),
        (["--scale", "huge"], "--scale"),
    ],
)
def test_cli_bad_input_names_the_option(tmp_path: Path, args: list[str], option: str) -> None:
    out = CliRunner().invoke(app, ["windtunnel", *args, "--out", str(tmp_path)])
    assert out.exit_code == 2
    assert option in out.output
    assert not any(tmp_path.iterdir())


def test_tracing_records_two_timescales_without_changing_training(tmp_path: Path) -> None:
    config = replace(TINY, task="bijection", task_params={"n_symbols": 4}, steps=12)
    plain = run(config, tmp_path / "plain", progress=False)
    for budget in (0.0, None):  # interrupted after the first step, then resumed to the end
        traced = run(
            config, tmp_path / "traced", progress=False, time_budget_s=budget, trace_every=3
        )
    assert _comparable({k: v for k, v in traced.items() if k != "trace"}) == _comparable(plain)
    lines = (tmp_path / "traced" / traced["trace"]["file"]).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["site"] for r in records} == {"blocks.0.attn"}
    assert all(r["type"] == "attention" for r in records)
    # Session 1 measured step 1; session 2 measured steps 2, 5, 8, 11 (every 3 from its start).
    assert [r["global_step"] for r in records] == [1, 2, 5, 8, 11]
    assert records[0]["attention_drift"] is None and records[1]["attention_drift"] is None
    assert all(r["attention_drift"] >= 0 and r["value_drift"] >= 0 for r in records[2:])
    summary = traced["trace"]["summary"]["blocks.0.attn"]
    ratio = summary["value_drift"] / summary["attention_drift"]
    assert summary["value_over_attention"] == pytest.approx(ratio)


def test_tracing_needs_the_transformer(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="transformer"):
        run(replace(TINY, model="mlp"), tmp_path, progress=False, trace_every=2)


def test_snapshots_record_the_weights_at_their_steps(tmp_path: Path) -> None:
    config = replace(TINY, task="bijection", task_params={"n_symbols": 4}, steps=7)
    result = run(config, tmp_path, progress=False, snapshot_every=3)
    snaps = torch.load(tmp_path / result["snapshots"]["file"], weights_only=True)
    assert snaps["steps"] == [0, 3, 6, 7]
    final = torch.load(tmp_path / CHECKPOINT, weights_only=True)["model"]
    assert all(torch.equal(snaps["states"][-1][k], final[k]) for k in final)
    assert not torch.equal(snaps["states"][0]["head.weight"], final["head.weight"])


def test_a_run_stops_at_its_plateau_and_says_it_converged(tmp_path: Path) -> None:
    config = replace(TINY, steps=600, eval_every=20, ckpt_every=20, stop_at_plateau=True)
    config = replace(config, plateau_tol=0.5, min_steps=100)  # a loose rule, met early
    result = run(config, tmp_path / "stopped", progress=False)
    assert result["converged"] and 100 <= result["steps"] < 600
    steps, kl = result["history"]["eval_step"], result["history"]["eval_kl"]
    assert steps[-1] == result["steps"] and result["kl_bits"] == kl[-1]
    # The same configuration without stopping trains to the cap, through the same first steps.
    capped = run(replace(config, stop_at_plateau=False), tmp_path / "capped", progress=False)
    assert capped["steps"] == 600
    assert capped["history"]["eval_kl"][: len(kl)] == kl


def test_a_frozen_part_stops_moving_at_its_step(tmp_path: Path) -> None:
    base = replace(TINY, task="bijection", task_params={"n_symbols": 4}, split_qkv=True, steps=8)
    for freeze in ("routing", "rest"):
        config = replace(base, freeze=freeze, freeze_at=4)
        result = run(config, tmp_path / freeze, progress=False, snapshot_every=4)
        snaps = torch.load(tmp_path / freeze / result["snapshots"]["file"], weights_only=True)
        at4, end = snaps["states"][1], snaps["states"][-1]
        assert snaps["steps"] == [0, 4, 8]
        for name in end:
            routing = ".attn.query." in name or ".attn.key." in name
            frozen = routing == (freeze == "routing")
            assert torch.equal(at4[name], end[name]) == frozen, (freeze, name)


def test_an_intervention_branched_from_a_kept_state_equals_one_run_from_scratch(
    tmp_path: Path,
) -> None:
    base = replace(TINY, task="bijection", task_params={"n_symbols": 4}, split_qkv=True, steps=12)
    run(base, tmp_path / "base", progress=False, states_at=[4, 8])
    assert state_path(tmp_path / "base", 4).exists() and state_path(tmp_path / "base", 8).exists()
    frozen = replace(base, freeze="rest", freeze_at=8)
    scratch = run(frozen, tmp_path / "scratch", progress=False)
    branched = run(
        frozen, tmp_path / "branch", progress=False, branch_from=state_path(tmp_path / "base", 4)
    )
    assert _comparable(branched) == _comparable(scratch)
    with pytest.raises(ValueError, match="past freeze_at"):
        run(
            replace(frozen, freeze_at=2),
            tmp_path / "late",
            progress=False,
            branch_from=state_path(tmp_path / "base", 4),
        )
    with pytest.raises(ValueError, match="not a branch point"):
        run(
            replace(frozen, lr=0.1),
            tmp_path / "other",
            progress=False,
            branch_from=state_path(tmp_path / "base", 4),
        )


def test_a_wsd_run_is_judged_at_the_start_of_its_decay(tmp_path: Path) -> None:
    config = replace(TINY, model="mlp", steps=30, schedule="wsd", decay_fraction=0.3)
    result = run(config, tmp_path, progress=False)
    h = result["history"]
    assert config.decay_start == 21 and 21 in h["eval_step"]  # evaluated where the decay starts
    assert result["plateau"]["judged_at"] == 21
    n = h["eval_step"].index(21) + 1
    before = plateau(h["eval_step"][:n], h["eval_kl"][:n], 0.2, config.plateau_tol, atol=1e-5)
    assert result["converged"] == before.converged
    assert result["plateau"]["since"] == before.since == 12


def test_a_wsd_run_with_stop_at_plateau_decays_from_its_plateau_and_resumes_alike(
    tmp_path: Path,
) -> None:
    config = replace(
        TINY,
        model="mlp",
        steps=400,
        eval_every=10,
        ckpt_every=10,
        schedule="wsd",
        decay_fraction=0.2,
        stop_at_plateau=True,
        plateau_tol=0.5,
        min_steps=40,
    )
    result = run(config, tmp_path / "whole", progress=False)
    start = result["plateau"]["decay_from"]
    assert start is not None and 40 <= start < config.decay_start
    assert result["converged"] and result["plateau"]["judged_at"] == start
    assert result["steps"] == config.decay_end(start) == start + round(0.25 * start)
    assert learning_rate(config, start - 1, start) == config.lr
    assert learning_rate(config, result["steps"], start) == 0.0
    # Killed in its decay and resumed: the same run.
    run(config, tmp_path / "resumed", progress=False, time_budget_s=0.0)
    while (resumed := run(config, tmp_path / "resumed", progress=False, time_budget_s=0.05))[
        "status"
    ] != "complete":
        pass
    assert _comparable(resumed) == _comparable(result)

"""`implicit-em windtunnel`: train one configuration, or the 3 x 2 comparison, and report in bits.

Each configuration runs in its own directory under `--out` (named by task, model, objective,
scale, seed and a hash of the full configuration, and `-trace<N>` for a run traced every N
steps), so rerunning the same command resumes an interrupted run and returns a finished one at
once. `--seeds N` trains seeds `--seed` to `--seed + N - 1` together in one loop (`seeds`), in one
directory named by `-seeds<first>-<last>`, each seed's result in its `seed-<s>` folder. Every argument is checked before training starts; a bad one is one line naming the option
and exit status 2. A stop at `--time-budget` is planned: it exits 0 and says how to resume.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch
import typer

from implicit_em.arguments import SEED_RANGE, check_device, check_writable_folder, fail
from implicit_em.windtunnel.config import MODELS, RunConfig, preset
from implicit_em.windtunnel.run_dirs import run_dir, seeds_dir
from implicit_em.windtunnel.seeds import seed_dir, train_seeds
from implicit_em.windtunnel.train import RESULT, run

__all__ = ["COMPARE_MODELS", "compare_table", "windtunnel"]

COMPARE_MODELS = MODELS
"""Rows of `--compare`: the transformer, the prefix MLP, the position-wise MLP."""
OBJECTIVES = ("ce", "sigmoid")


class TaskName(StrEnum):
    bijection = "bijection"
    hmm = "hmm"
    dice = "dice"


class ModelName(StrEnum):
    transformer = "transformer"
    mlp_prefix = "mlp-prefix"
    mlp_pos = "mlp-pos"
    mlp = "mlp"


class Objective(StrEnum):
    ce = "ce"
    softmax_brier = "softmax-brier"
    sigmoid = "sigmoid"
    brier = "brier"
    softmax_linear = "softmax-linear"
    sigmoid_linear = "sigmoid-linear"


class Scale(StrEnum):
    default = "default"
    paper = "paper"
    reference = "reference"
    reference_cpu = "reference-cpu"
    reference_budget = "reference-budget"


class Norm(StrEnum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Targets(StrEnum):
    sample = "sample"
    posterior = "posterior"


def _traced(config: RunConfig, trace_every: int | None) -> int | None:
    """The tracing period of `config`'s run: transformers only."""
    return trace_every if config.model == "transformer" else None


def _check_run_dir(directory: Path, trace_every: int | None) -> None:
    """Refuse, before any training, a finished run that lacks the tracing asked for."""
    result = directory / RESULT
    if (
        trace_every is not None
        and result.exists()
        and "trace" not in json.loads(result.read_text())
    ):
        fail(f"--trace: {result} was run without tracing; use another --out folder")


def compare_table(
    results: dict[tuple[str, str], dict[str, Any]], floor: float | None = None
) -> str:
    """The 3 x 2 table: a row per model, bits MAE and KL under CE and under independent sigmoids,
    and the parameter count; the context-free floor (when the task has one) below it."""
    header = (
        f"{'model':<12} {'CE MAE':>9} {'CE KL':>9} {'sigm MAE':>9} {'sigm KL':>9} {'params':>9}"
    )
    lines = [header, "-" * len(header)]
    for model in COMPARE_MODELS:
        ce, sig = results[(model, "ce")], results[(model, "sigmoid")]
        lines.append(
            f"{model:<12} {ce['bits_mae']:>9.4f} {ce['kl_bits']:>9.4f} {sig['bits_mae']:>9.4f} "
            f"{sig['kl_bits']:>9.4f} {ce['n_parameters']:>9,}"
        )
    if floor is not None:
        lines.append(_floor_line(floor))
    return "\n".join(lines)


def _floor_line(floor: float) -> str:
    return (
        f"context-free floor {floor:.4f} bits (MAE and KL; V = 20, L = 19: 1.107 without "
        "replacement, 1.849 with)"
    )


def _trace_lines(summary: dict[str, dict[str, float | None]]) -> str:
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3g}"

    return "".join(
        f"\n  {site}: attention drift {fmt(m['attention_drift'])}, value drift "
        f"{fmt(m['value_drift'])}, value/attention {fmt(m['value_over_attention'])}"
        for site, m in summary.items()
    )


def _summary(result: dict[str, Any], path: Path) -> str:
    c = result["config"]
    line = (
        f"{c['task']} {c['model']}/{c['objective']} ({c['targets']} targets): "
        f"bits MAE {result['bits_mae']:.5f}, KL {result['kl_bits']:.5f} bits, "
        f"{result['n_parameters']:,} parameters, {result['steps']} steps "
        f"({'converged' if result['converged'] else 'not converged'}), "
        f"{result['wall_time_s']:.0f} s -> {path}"
    )
    if result.get("sigma_sum_gap") is not None:
        line += f"\n  mean |sum of sigmoids - 1| {result['sigma_sum_gap']:.4f}"
    if result.get("context_free_bits") is not None:
        line += "\n  " + _floor_line(result["context_free_bits"])
    return line + (_trace_lines(result["trace"]["summary"]) if "trace" in result else "")


def _train(
    config: RunConfig, directory: Path, device: str, budget: float | None, trace_every: int | None
) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = run(
            config,
            directory,
            device=device,
            time_budget_s=budget,
            trace_every=_traced(config, trace_every),
        )
    except ValueError as err:
        fail(str(err))
    if result["status"] != "complete":
        planned = budget is not None and time.perf_counter() - started >= budget
        reason = "the --time-budget is spent" if planned else "interrupted"
        typer.echo(
            f"stopped at step {result['steps']}/{config.steps} ({reason}); checkpoint in "
            f"{directory}. Rerun the same command to resume."
        )
        raise typer.Exit(code=0 if planned else 130)
    from implicit_em.windtunnel.figures import plot_drift, plot_positions, plot_training

    label = f"{config.model}/{config.objective}"
    plot_positions([result], [label], directory / "positions.png")
    plot_training([result], [label], directory / "training.png")
    if "trace" in result:
        lines = (directory / result["trace"]["file"]).read_text().splitlines()
        plot_drift([json.loads(line) for line in lines], directory / "drift.png")
    return result


def _train_seeds(
    config: RunConfig,
    seeds: list[int],
    directory: Path,
    device: str,
    budget: float | None,
    compile: bool,
) -> list[dict[str, Any]]:
    started = time.perf_counter()
    try:
        results = train_seeds(
            config, seeds, directory, device=device, time_budget_s=budget, compile=compile
        )
    except ValueError as err:
        fail(str(err))
    if any(r["status"] != "complete" for r in results):
        planned = budget is not None and time.perf_counter() - started >= budget
        reason = "the --time-budget is spent" if planned else "interrupted"
        steps = min(r["steps"] for r in results)
        typer.echo(
            f"stopped at step {steps}/{config.steps} ({reason}); checkpoint in "
            f"{directory}. Rerun the same command to resume."
        )
        raise typer.Exit(code=0 if planned else 130)
    from implicit_em.windtunnel.figures import plot_positions, plot_training

    labels = [f"seed {s}" for s in seeds]
    plot_positions(results, labels, directory / "positions.png")
    plot_training(results, labels, directory / "training.png")
    return results


def windtunnel(
    task: TaskName = typer.Option(TaskName.bijection, help="Which wind-tunnel task."),
    model: ModelName = typer.Option(
        ModelName.transformer,
        help="transformer; mlp-prefix: MLP over the whole prefix (alias: mlp); mlp-pos: "
        "position-wise MLP, no mixing across positions. MLPs match the transformer's parameters.",
    ),
    objective: Objective = typer.Option(
        Objective.ce,
        help="ce: softmax cross-entropy; sigmoid: independent BCE; brier: independent squared "
        "errors of the sigmoids.",
    ),
    targets: Targets = typer.Option(
        None, help="Train on the exact posterior (soft) or on sampled answers (hard)."
    ),
    steps: int = typer.Option(None, min=1, help="Training steps (default: per scale)."),
    seed: int = typer.Option(0, **SEED_RANGE, help="Seed of initialization and data."),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N."),
    quick: bool = typer.Option(False, "--quick", help="A CPU configuration of about a minute."),
    scale: Scale = typer.Option(
        None,
        help="default (CPU minutes; the default unless --quick); paper (older GPU setting); "
        "reference (the published protocol, for a GPU); reference-cpu (same tasks and targets, "
        "smaller transformer); reference-budget (the reference's data budget on a CPU, "
        "fixed length, cosine to zero, convergence gate).",
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Run transformer / prefix MLP / position-wise MLP x CE / sigmoid; print the table.",
    ),
    symbols: int = typer.Option(
        None, "--symbols", min=2, help="Bijection: V symbols (default: scale)."
    ),
    n_pairs: int = typer.Option(
        None, "--n-pairs", min=1, help="Bijection: L pairs shown, 1 <= L <= V (default: scale)."
    ),
    replacement: bool = typer.Option(
        None, "--replacement/--no-replacement", help="Bijection: keys drawn with replacement."
    ),
    norm: Norm = typer.Option(None, "--norm", help="Normalization layers (default: per scale)."),
    out: Path = typer.Option(Path("outputs/windtunnel"), help="Base directory of runs."),
    batch_size: int = typer.Option(None, min=1, help="Sequences per step (default: per scale)."),
    lr: float = typer.Option(
        None, help="Peak learning rate (warmup + cosine), > 0 (default: per scale)."
    ),
    eager: bool = typer.Option(
        False, "--eager", help="Eager attention (keeps alpha) instead of SDPA."
    ),
    threads: int = typer.Option(
        1,
        min=1,
        help="torch CPU threads (these models are too small to gain from more; shared cores lose).",
    ),
    ckpt_every: int = typer.Option(
        None, min=1, help="Checkpoint period in steps (default: per scale)."
    ),
    trace: bool = typer.Option(
        False, "--trace", help="Trace attention drift vs value drift (transformer runs)."
    ),
    trace_every: int = typer.Option(100, min=1, help="Steps between trace measurements."),
    time_budget: float = typer.Option(
        None,
        help="Stop (checkpointed, resumable; exit status 0) after this many seconds, > 0.",
    ),
    seeds: int = typer.Option(
        1,
        "--seeds",
        min=1,
        help="Train N seeds (--seed to --seed + N - 1) together in one loop, their models "
        "stacked; each seed equals its run alone to float32 rounding.",
    ),
    compile_forward: bool = typer.Option(
        False,
        "--compile",
        help="With --seeds: compile the stacked forward (torch.compile; equal to float "
        "tolerance, not bit for bit).",
    ),
) -> None:
    """Train on a Bayesian wind-tunnel task and report the error in bits against the exact posterior."""
    if quick and scale is not None:
        fail("--quick is a scale of its own: give --quick or --scale, not both")
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        fail(f"--lr must be a finite number > 0, got {lr}")
    if time_budget is not None and not time_budget > 0:
        fail(f"--time-budget must be > 0 seconds, got {time_budget}")
    if seeds > 1 and (compare or trace):
        fail("--seeds trains one configuration without tracing: not with --compare or --trace")
    if compile_forward and seeds == 1:
        fail("--compile applies to --seeds N with N > 1")
    if seed + seeds - 1 > SEED_RANGE["max"]:
        fail(f"--seeds: the last seed {seed + seeds - 1} passes {SEED_RANGE['max']}")
    if trace and not compare and model.value != "transformer":
        fail("--trace reads attention sites: it needs --model transformer (or --compare)")
    device = check_device(device)
    scale_name = "quick" if quick else (scale or Scale.default).value
    try:
        base = _base_config(
            task.value, scale_name, seed, eager, steps, batch_size, lr, ckpt_every, targets, norm
        )
        base = _with_bijection_options(base, symbols, n_pairs, replacement)
        base.make_task()
    except ValueError as err:
        fail(str(err))
    traced = trace_every if trace else None
    models = COMPARE_MODELS if compare else (model.value,)
    objectives = OBJECTIVES if compare else (objective.value,)
    configs = [replace(base, model=m, objective=o) for m in models for o in objectives]
    directories = [run_dir(out, c, scale_name, _traced(c, traced)) for c in configs]
    for config, directory in zip(configs, directories, strict=True):
        _check_run_dir(directory, _traced(config, traced))
    check_writable_folder(out, "--out")
    torch.set_num_threads(threads)
    if seeds > 1:
        trained = list(range(seed, seed + seeds))
        directory = seeds_dir(out, base, scale_name, trained)
        for s, result in zip(
            trained,
            _train_seeds(base, trained, directory, device, time_budget, compile_forward),
            strict=True,
        ):
            typer.echo(_summary(result, seed_dir(directory, s) / RESULT))
        return
    if not compare:
        result = _train(configs[0], directories[0], device, time_budget, traced)
        typer.echo(_summary(result, directories[0] / RESULT))
        return
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for config, directory in zip(configs, directories, strict=True):
        key = (config.model, config.objective)
        results[key] = _train(config, directory, device, time_budget, traced)
        typer.echo(_summary(results[key], directory / RESULT))
    from implicit_em.windtunnel.figures import plot_positions, plot_training

    labels = [f"{m}/{o}" for m, o in results]
    figure_dir = out / f"{base.task}-compare-{scale_name}-s{seed}"
    floor = results[(COMPARE_MODELS[0], "ce")].get("context_free_bits")
    plot_positions(list(results.values()), labels, figure_dir / "positions.png")
    plot_training(list(results.values()), labels, figure_dir / "training.png")
    table = compare_table(results, floor)
    wall = sum(r["wall_time_s"] for r in results.values())
    (figure_dir / "table.txt").write_text(table + "\n")
    (figure_dir / "results.json").write_text(
        json.dumps({f"{m}/{o}": r for (m, o), r in results.items()}, indent=1)
    )
    typer.echo(f"\n{table}\n\ntraining time {wall:.0f} s in all; figures: {figure_dir}")


def _base_config(
    task: str,
    scale: str,
    seed: int,
    eager: bool,
    steps: int | None,
    batch_size: int | None,
    lr: float | None,
    ckpt_every: int | None,
    targets: Targets | None,
    norm: Norm | None,
) -> RunConfig:
    overrides: dict[str, Any] = {"seed": seed, "sdpa": not eager}
    for key, value in (
        ("steps", steps),
        ("batch_size", batch_size),
        ("lr", lr),
        ("ckpt_every", ckpt_every),
    ):
        if value is not None:
            overrides[key] = value
    if targets is not None:
        overrides["targets"] = targets.value
    if norm is not None:
        overrides["norm"] = norm.value
    return preset(task, scale, **overrides)


def _with_bijection_options(
    base: RunConfig, symbols: int | None, n_pairs: int | None, replacement: bool | None
) -> RunConfig:
    given = {"n_symbols": symbols, "n_pairs": n_pairs, "replacement": replacement}
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return base
    if base.task != "bijection":
        raise ValueError("--symbols, --n-pairs and --replacement apply to --task bijection only")
    config = replace(base, task_params={**base.task_params, **given})
    try:
        config.make_task()
    except ValueError as err:
        option = "--n-pairs" if str(err).startswith("n_pairs") else "--symbols"
        raise ValueError(f"{option}: {err}") from err
    return config

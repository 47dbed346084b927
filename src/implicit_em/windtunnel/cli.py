"""`implicit-em windtunnel`: train one configuration, or the 3 x 2 comparison, and report in bits.

Each configuration runs in its own directory under `--out` (named by task, model, objective,
scale, seed and a hash of the full configuration), so rerunning the same command resumes an
interrupted run and returns a finished one at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch
import typer

from implicit_em.windtunnel.config import MODELS, RunConfig, preset
from implicit_em.windtunnel.train import run

__all__ = ["COMPARE_MODELS", "compare_table", "run_dir", "windtunnel"]

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
    sigmoid = "sigmoid"
    brier = "brier"


class Scale(StrEnum):
    default = "default"
    paper = "paper"
    reference = "reference"
    reference_cpu = "reference-cpu"


class Norm(StrEnum):
    layernorm = "layernorm"
    rmsnorm = "rmsnorm"


class Targets(StrEnum):
    sample = "sample"
    posterior = "posterior"


def run_dir(out: Path, config: RunConfig, scale: str) -> Path:
    """The directory of `config`: readable fields plus a hash of the whole configuration."""
    digest = hashlib.sha1(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:8]
    return out / f"{config.task}-{config.model}-{config.objective}-{scale}-s{config.seed}-{digest}"


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
    traced = trace_every if config.model == "transformer" else None
    result = run(config, directory, device=device, time_budget_s=budget, trace_every=traced)
    if result["status"] != "complete":
        typer.echo(
            f"stopped at step {result['steps']}/{config.steps}; checkpoint in {directory}. "
            "Rerun the same command to resume."
        )
        raise typer.Exit(code=130)
    from implicit_em.windtunnel.figures import plot_drift, plot_positions, plot_training

    label = f"{config.model}/{config.objective}"
    plot_positions([result], [label], directory / "positions.png")
    plot_training([result], [label], directory / "training.png")
    if "trace" in result:
        lines = (directory / result["trace"]["file"]).read_text().splitlines()
        plot_drift([json.loads(line) for line in lines], directory / "drift.png")
    return result


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
    steps: int = typer.Option(None, help="Training steps (default: per scale)."),
    seed: int = typer.Option(0, help="Seed of initialization and data."),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    quick: bool = typer.Option(False, "--quick", help="A CPU configuration of about a minute."),
    scale: Scale = typer.Option(
        Scale.default,
        help="default (CPU minutes); paper (older GPU setting); reference (the published "
        "protocol, for a GPU); reference-cpu (same tasks and targets, smaller transformer).",
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Run transformer / prefix MLP / position-wise MLP x CE / sigmoid; print the table.",
    ),
    symbols: int = typer.Option(None, "--symbols", help="Bijection: V symbols (default: scale)."),
    n_pairs: int = typer.Option(
        None, "--n-pairs", help="Bijection: L pairs shown, 1 <= L <= V (default: scale)."
    ),
    replacement: bool = typer.Option(
        None, "--replacement/--no-replacement", help="Bijection: keys drawn with replacement."
    ),
    norm: Norm = typer.Option(None, "--norm", help="Normalization layers (default: per scale)."),
    out: Path = typer.Option(Path("outputs/windtunnel"), help="Base directory of runs."),
    batch_size: int = typer.Option(None, help="Sequences per step (default: per scale)."),
    lr: float = typer.Option(
        None, help="Peak learning rate (warmup + cosine) (default: per scale)."
    ),
    eager: bool = typer.Option(
        False, "--eager", help="Eager attention (keeps alpha) instead of SDPA."
    ),
    threads: int = typer.Option(
        1,
        help="torch CPU threads (these models are too small to gain from more; shared cores lose).",
    ),
    ckpt_every: int = typer.Option(None, help="Checkpoint period in steps (default: per scale)."),
    trace: bool = typer.Option(
        False, "--trace", help="Trace attention drift vs value drift (transformer runs)."
    ),
    trace_every: int = typer.Option(100, help="Steps between trace measurements."),
    time_budget: float = typer.Option(
        None, help="Stop (checkpointed, resumable) after this many seconds."
    ),
) -> None:
    """Train on a Bayesian wind-tunnel task and report the error in bits against the exact posterior."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        typer.echo(f"error: --out {out}: not a writable folder ({err.strerror})", err=True)
        raise typer.Exit(code=2) from None
    torch.set_num_threads(threads)
    scale_name = "quick" if quick else scale.value
    try:
        base = _base_config(
            task.value, scale_name, seed, eager, steps, batch_size, lr, ckpt_every, targets, norm
        )
        base = _with_bijection_options(base, symbols, n_pairs, replacement)
        base.make_task()
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(code=2) from err
    if not compare:
        config = replace(base, model=model.value, objective=objective.value)
        directory = run_dir(out, config, scale_name)
        result = _train(config, directory, device, time_budget, trace_every if trace else None)
        typer.echo(_summary(result, directory / "result.json"))
        return
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for m in COMPARE_MODELS:
        for o in OBJECTIVES:
            config = replace(base, model=m, objective=o)
            directory = run_dir(out, config, scale_name)
            results[(m, o)] = _train(
                config, directory, device, time_budget, trace_every if trace else None
            )
            typer.echo(_summary(results[(m, o)], directory / "result.json"))
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

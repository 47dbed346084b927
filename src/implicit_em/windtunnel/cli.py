"""``implicit-em windtunnel``: train one configuration, or the 2 x 2 comparison, and report in bits.

Each configuration runs in its own directory under ``--out`` (named by task, model, objective,
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

from implicit_em.windtunnel.train import RunConfig, preset, run

__all__ = ["compare_table", "run_dir", "windtunnel"]


class TaskName(StrEnum):
    bijection = "bijection"
    hmm = "hmm"
    dice = "dice"


class ModelName(StrEnum):
    transformer = "transformer"
    mlp = "mlp"


class Objective(StrEnum):
    ce = "ce"
    sigmoid = "sigmoid"


class Scale(StrEnum):
    default = "default"
    paper = "paper"


class Targets(StrEnum):
    sample = "sample"
    posterior = "posterior"


def run_dir(out: Path, config: RunConfig, scale: str) -> Path:
    """The directory of ``config``: readable fields plus a hash of the whole configuration."""
    digest = hashlib.sha1(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:8]
    return out / f"{config.task}-{config.model}-{config.objective}-{scale}-s{config.seed}-{digest}"


def compare_table(results: dict[tuple[str, str], dict[str, Any]]) -> str:
    """The 2 x 2 table (objective x model) of bits MAE and KL with the MLP/transformer ratios."""
    lines = [
        f"{'objective':<10} {'transformer MAE':>16} {'transformer KL':>14} {'MLP MAE':>10} "
        f"{'MLP KL':>10} {'MLP/tf MAE':>11} {'MLP/tf KL':>10}",
    ]
    lines.append("-" * len(lines[0]))
    for objective in ("ce", "sigmoid"):
        tf, mlp = results[("transformer", objective)], results[("mlp", objective)]
        ratio_mae = mlp["bits_mae"] / tf["bits_mae"] if tf["bits_mae"] > 0 else float("inf")
        ratio_kl = mlp["kl_bits"] / tf["kl_bits"] if tf["kl_bits"] > 0 else float("inf")
        lines.append(
            f"{objective:<10} {tf['bits_mae']:>16.5f} {tf['kl_bits']:>14.5f} {mlp['bits_mae']:>10.5f} "
            f"{mlp['kl_bits']:>10.5f} {ratio_mae:>11.1f} {ratio_kl:>10.1f}"
        )
    return "\n".join(lines)


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
        f"{result['n_parameters']:,} parameters, {result['steps']} steps, "
        f"{result['wall_time_s']:.0f} s -> {path}"
    )
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
        ModelName.transformer, help="Transformer or capacity-matched MLP."
    ),
    objective: Objective = typer.Option(
        Objective.ce, help="ce: softmax cross-entropy; sigmoid: independent BCE."
    ),
    targets: Targets = typer.Option(
        None, help="Train on the exact posterior (soft) or on sampled answers (hard)."
    ),
    steps: int = typer.Option(None, help="Training steps (default: per scale)."),
    seed: int = typer.Option(0, help="Seed of initialization and data."),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    quick: bool = typer.Option(False, "--quick", help="A CPU configuration of about a minute."),
    scale: Scale = typer.Option(
        Scale.default, help="default (CPU, ~10 min) or paper (GPU: V=20, 6x192, 100k steps)."
    ),
    compare: bool = typer.Option(
        False, "--compare", help="Run transformer/MLP x CE/sigmoid and print the table."
    ),
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
    base = preset(task.value, scale_name, **overrides)
    if not compare:
        config = replace(base, model=model.value, objective=objective.value)
        directory = run_dir(out, config, scale_name)
        result = _train(config, directory, device, time_budget, trace_every if trace else None)
        typer.echo(_summary(result, directory / "result.json"))
        return
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for m in ("transformer", "mlp"):
        for o in ("ce", "sigmoid"):
            config = replace(base, model=m, objective=o)
            directory = run_dir(out, config, scale_name)
            results[(m, o)] = _train(
                config, directory, device, time_budget, trace_every if trace else None
            )
            typer.echo(_summary(results[(m, o)], directory / "result.json"))
    from implicit_em.windtunnel.figures import plot_positions, plot_training

    labels = [f"{m}/{o}" for m, o in results]
    figure_dir = out / f"{base.task}-compare-{scale_name}-s{seed}"
    plot_positions(list(results.values()), labels, figure_dir / "positions.png")
    plot_training(list(results.values()), labels, figure_dir / "training.png")
    table = compare_table(results)
    (figure_dir / "table.txt").write_text(table + "\n")
    typer.echo(f"\n{table}\n\nfigures: {figure_dir}")

"""Shared by E10-E12: the wind-tunnel configurations of each report size and their runs.

A size's configuration names a preset (`scale`) with `overrides`, the `seeds`, the `label`
of its run directories and `runs_dir`: `outputs/windtunnel` (the CLI's default, so that runs
made by `implicit-em windtunnel --scale reference-cpu --compare` are reused when the
configuration matches) or `None` for a folder inside the experiment's own output (smoke size).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from implicit_em.report.progress import progress
from implicit_em.windtunnel.grid import GridRun, run_grid
from implicit_em.windtunnel.train import RunConfig, preset

RUNS_DIR = "outputs/windtunnel"
MODEL_NAMES = {
    "transformer": "transformer",
    "mlp-prefix": "prefix MLP",
    "mlp-pos": "position-wise MLP",
}

_QUICK_OVERRIDES: dict[str, Any] = {
    "task_params": {"n_symbols": 6, "n_pairs": 5, "replacement": False},
    "n_layer": 2,
    "n_head": 2,
    "n_embd": 32,
    "steps": 600,
    "warmup": 100,
    "eval_every": 200,
    "ckpt_every": 600,
    "n_test": 256,
}
_SMOKE_OVERRIDES: dict[str, Any] = {
    "task_params": {"n_symbols": 4, "n_pairs": 3, "replacement": False},
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 16,
    "steps": 20,
    "warmup": 5,
    "eval_every": 10,
    "ckpt_every": 20,
    "n_test": 32,
    "batch_size": 16,
}

CONFIGS: dict[str, dict[str, Any]] = {
    "smoke": {
        "scale": "reference-cpu",
        "overrides": _SMOKE_OVERRIDES,
        "seeds": [0],
        "label": "report-smoke",
        "runs_dir": None,
    },
    "quick": {
        "scale": "reference-cpu",
        "overrides": _QUICK_OVERRIDES,
        "seeds": [0, 1, 2],
        "label": "report-quick",
        "runs_dir": RUNS_DIR,
    },
    "full": {
        "scale": "reference-cpu",
        "overrides": {},
        "seeds": [0, 1, 2, 3, 4],
        "label": "reference-cpu",
        "runs_dir": RUNS_DIR,
    },
}


def base_config(config: dict[str, Any]) -> RunConfig:
    """The bijection configuration of a report size."""
    return preset("bijection", config["scale"], **config["overrides"])


def runs_dir(config: dict[str, Any], out: Path) -> Path:
    return Path(config["runs_dir"]) if config["runs_dir"] else out / "runs"


def grid(
    config: dict[str, Any],
    out: Path,
    models: Sequence[str],
    objectives: Sequence[str],
    base: RunConfig | None = None,
    **run_options: Any,
) -> dict[GridRun, dict[str, Any]]:
    """Run (or reuse) every model x objective x seed of the size's configuration."""
    return run_grid(
        base or base_config(config),
        config["label"],
        runs_dir(config, out),
        config["seeds"],
        models=models,
        objectives=objectives,
        device=config.get("device", "cpu"),
        progress=progress,
        **run_options,
    )


def seed_mean(
    results: dict[GridRun, dict[str, Any]], model: str, objective: str, key: str
) -> float:
    """Mean of `key` over the seeds of one model and objective."""
    return statistics.fmean(
        r[key] for (m, o, _), r in results.items() if (m, o) == (model, objective)
    )


def ratio(a: float, b: float) -> float:
    """`a / b`, infinite when `b` is 0 and `a` is not."""
    if b > 0:
        return a / b
    return math.inf if a > 0 else 1.0


def floor_per_position(result: dict[str, Any], n_symbols: int) -> tuple[list[int], list[float]]:
    """The context-free error at each supervised position: log2 V minus the mean exact entropy."""
    entropy = result["per_position"]["entropy"]
    pairs = [(t, math.log2(n_symbols) - h) for t, h in enumerate(entropy) if h is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]


def supervised(curve: list[float | None], floor: float = 1e-6) -> tuple[list[int], list[float]]:
    pairs = [(t, max(v, floor)) for t, v in enumerate(curve) if v is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]

"""Shared by E10-E12: the wind-tunnel configurations of each report size, and their units of work.

A size's configuration names a preset (`scale`) with `train` overrides (the same for every
task), the task sizes (`tasks`, None: the preset's), the `seeds` (E11 has its own
`e11_seeds`), the `label` of its run directories, `runs_dir` (`outputs/windtunnel`, the CLI's
default, so that runs made by `implicit-em windtunnel` are reused when the configuration
matches; None: a folder inside the experiment's own output) and `workers`, the configurations
trained at once in separate processes.

Every run trains to a held-out KL plateau (`implicit_em.windtunnel.evaluation.plateau`), with
the step cap and tolerance of its size; each experiment gates on every run having converged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from implicit_em.report.progress import progress
from implicit_em.report.stats import mean_interval
from implicit_em.windtunnel.config import RunConfig, preset
from implicit_em.windtunnel.grid import run_configs, worker_pool

RUNS_DIR = "outputs/windtunnel"
TASKS = ("bijection", "hmm", "dice")
MODEL_NAMES = {
    "transformer": "transformer",
    "mlp-prefix": "prefix MLP",
    "mlp-pos": "position-wise MLP",
}
TASK_NAMES = {"bijection": "bijection", "hmm": "HMM filter", "dice": "dice (Laplace)"}

_SMOKE_TASKS = {
    "bijection": {"n_symbols": 4, "n_pairs": 3, "replacement": False},
    "hmm": {"n_states": 2, "n_observations": 2, "length": 4, "levels": 10, "floor": 1},
    "dice": {"n_faces": 2, "length": 6},
}
_QUICK_TASKS = {
    "bijection": {"n_symbols": 6, "n_pairs": 5, "replacement": False},
    "hmm": {"n_states": 2, "n_observations": 2, "length": 8, "levels": 10, "floor": 1},
    "dice": {"n_faces": 2, "length": 12},
}
_SMOKE_TRAIN: dict[str, Any] = {
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 16,
    "batch_size": 32,
    "lr": 1e-2,
    "steps": 120,
    "warmup": 10,
    "eval_every": 20,
    "ckpt_every": 60,
    "n_test": 64,
    "min_steps": 40,
    "plateau_tol": 1.0,
}
"""Smoke checks the machinery in seconds: long enough for the models to train, with the
plateau rule's tolerance at 100% (every run counts as converged)."""

_QUICK_TRAIN: dict[str, Any] = {
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 32,
    "batch_size": 64,
    "lr": 3e-3,
    "warmup": 50,
    "steps": 1000,
    "eval_every": 100,
    "ckpt_every": 500,
    "n_test": 256,
    "min_steps": 400,
    "plateau_tol": 0.1,
    "stop_at_plateau": True,
}
_FULL_TRAIN: dict[str, Any] = {
    "steps": 4000,
    "eval_every": 200,
    "ckpt_every": 500,
    "min_steps": 1500,
    "stop_at_plateau": True,
}

CONFIGS: dict[str, dict[str, Any]] = {
    "smoke": {
        "scale": "reference-cpu",
        "train": _SMOKE_TRAIN,
        "tasks": _SMOKE_TASKS,
        "seeds": [0],
        "e11_seeds": [0],
        "e12": {"steps": 120, "freeze_at": [60], "snapshot_every": 20},
        "label": "report-smoke",
        "runs_dir": None,
        "workers": 1,
    },
    "quick": {
        "scale": "reference-cpu",
        "train": _QUICK_TRAIN,
        "tasks": _QUICK_TASKS,
        "seeds": [0, 1, 2],
        "e11_seeds": [0, 1, 2, 3, 4],
        "e12": {"steps": 800, "freeze_at": [200, 400, 600], "snapshot_every": 50},
        "label": "report-quick",
        "runs_dir": RUNS_DIR,
        "workers": 2,
    },
    "full": {
        "scale": "reference-cpu",
        "train": _FULL_TRAIN,
        "tasks": None,
        "seeds": [0, 1, 2, 3, 4],
        "e11_seeds": [0, 1, 2, 3, 4],
        "e12": {"steps": 3000, "freeze_at": [500, 1000, 2000], "snapshot_every": 100},
        "label": "reference-cpu",
        "runs_dir": RUNS_DIR,
        "workers": 2,
    },
}


def task_config(config: dict[str, Any], task: str, **overrides: Any) -> RunConfig:
    """The configuration of `task` at a report size (`overrides` replace any field)."""
    sizes = {} if config["tasks"] is None else {"task_params": config["tasks"][task]}
    return preset(task, config["scale"], **{**config["train"], **sizes, **overrides})


def runs_dir(config: dict[str, Any], out: Path) -> Path:
    return Path(config["runs_dir"]) if config["runs_dir"] else out / "runs"


@contextmanager
def pool(config: dict[str, Any]) -> Iterator[Executor | None]:
    """The worker processes of a report size (None: train in this process)."""
    with worker_pool(config.get("workers", 1)) as workers:
        yield workers


def train(
    config: dict[str, Any],
    out: Path,
    configs: Sequence[RunConfig],
    workers: Executor | None,
    **run_options: Any,
) -> list[dict[str, Any]]:
    """Train (or reuse) `configs` in the size's run directories; a summary of each."""
    results = run_configs(
        configs,
        config["label"],
        runs_dir(config, out),
        device=config.get("device", "cpu"),
        progress=progress,
        pool=workers,
        **run_options,
    )
    return [summary(r) for r in results]


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """What the experiments read of a run's result (plain JSON for a unit)."""
    keys = (
        "kl_bits",
        "bits_mae",
        "uniform_kl_bits",
        "context_free_bits",
        "sigma_sum_gap",
        "converged",
        "steps",
        "wall_time_s",
        "n_parameters",
    )
    return {
        **{k: result[k] for k in keys},
        "kl_initial": result["history"]["eval_kl"][0],
        "per_position_kl": result["per_position"]["kl"],
    }


def ratio(a: float, b: float) -> float:
    """`a / b`, infinite when `b` is 0 and `a` is not."""
    if b > 0:
        return a / b
    return math.inf if a > 0 else 1.0


def supervised(curve: list[float | None], floor: float = 1e-7) -> tuple[list[int], list[float]]:
    """The positions with a value, and the values clipped below at `floor` (for a log axis)."""
    pairs = [(t, max(v, floor)) for t, v in enumerate(curve) if v is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]


def per_seed(units: dict[int, Any], read: Callable[[Any], float]) -> list[float]:
    """`read(unit)` for every seed's unit, in seed order."""
    return [read(units[s]) for s in sorted(units)]


def interval_text(values: Sequence[float]) -> str:
    """`mean [low, high]` of a 95% Student t interval over seeds, for tables."""
    i = mean_interval(list(values), "t")
    return f"{i.estimate:.4g} [{i.low:.3g}, {i.high:.3g}]"

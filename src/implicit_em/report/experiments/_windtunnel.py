"""Shared by E10-E12: the wind-tunnel configurations of each report size, and their units of work.

A size's configuration names a preset (`scale`) with `train` overrides (the same for every
task), the task sizes (`tasks`, None: the preset's), the `seeds` of E10, E11's `seeds` and
the step budget of an objective that needs more than E10's (`e11`), E12's run length, freeze
steps, snapshot period and seeds (`e12`), the `label` of its run directories, `runs_dir` (`outputs/windtunnel`, the CLI's
default, so that runs made by `implicit-em windtunnel` are reused when the configuration
matches; None: a folder inside the experiment's own output) and `workers`, the configurations
trained at once in separate processes.

**Converged runs.** E10 and E11 train each run for its whole step budget under a learning rate
that warms up, then decays by a cosine to zero at the last step (`min_lr_ratio = 0`); E12, which
measures timescales, holds the rate constant after warmup. Every run is then judged by the
plateau rule (`implicit_em.windtunnel.evaluation.plateau`) at its last evaluation: over the last
20% of its steps, its best held-out KL improved by less than 2% of itself, or by less than 0.5%
of the task's floor (the uniform prediction's KL, `plateau_floor_tol`). Each experiment gates on
every run having converged: an unconverged run makes the verdict `invalid`. Under a decay to
zero, "converged" means converged for that budget (the KL no longer moves as the rate runs out),
not that a longer schedule could not go lower; the floor tolerance states that what is left
cannot move a criterion read as a share of the floor by more than half a point. Smoke runs
check the machinery only: their tolerance is 100%.
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
from implicit_em.windtunnel.grid import GridRun, run_configs, run_grid, worker_pool

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

_RULE: dict[str, Any] = {
    "min_lr_ratio": 0.0,
    "plateau_tol": 0.02,
    "plateau_floor_tol": 0.005,
    "plateau_window": 0.2,
    "stop_at_plateau": False,
}
"""The schedule and the plateau rule of the quick and full sizes (see the module)."""

_QUICK_TRAIN: dict[str, Any] = {
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 32,
    "batch_size": 64,
    "lr": 3e-3,
    "warmup": 50,
    "steps": 1200,
    "eval_every": 100,
    "ckpt_every": 500,
    "n_test": 256,
    **_RULE,
}
_FULL_TRAIN: dict[str, Any] = {
    "steps": 4000,
    "eval_every": 200,
    "ckpt_every": 500,
    **_RULE,
}

CONFIGS: dict[str, dict[str, Any]] = {
    "smoke": {
        "scale": "reference-cpu",
        "train": _SMOKE_TRAIN,
        "tasks": _SMOKE_TASKS,
        "seeds": [0],
        "e11": {"seeds": [0], "steps": {}},
        "e12": {"steps": 120, "freeze_at": [60], "snapshot_every": 20, "seeds": [0]},
        "label": "report-smoke",
        "runs_dir": None,
        "workers": 1,
    },
    "quick": {
        "scale": "reference-cpu",
        "train": _QUICK_TRAIN,
        "tasks": _QUICK_TASKS,
        "seeds": [0, 1, 2],
        "e11": {"seeds": [0, 1, 2, 3, 4], "steps": {"brier": 4800}},
        "e12": {
            "steps": 1200,
            "freeze_at": [200, 400, 600],
            "snapshot_every": 50,
            "seeds": [0, 1, 2],
        },
        "label": "report-quick",
        "runs_dir": RUNS_DIR,
        "workers": 2,
    },
    "full": {
        "scale": "reference-cpu",
        "train": _FULL_TRAIN,
        "tasks": None,
        "seeds": [0, 1, 2, 3, 4],
        "e11": {"seeds": [0, 1, 2, 3, 4], "steps": {"brier": 16000}},
        "e12": {
            "steps": 4000,
            "freeze_at": [500, 1000, 2000],
            "snapshot_every": 100,
            "seeds": [0, 1, 2],
        },
        "label": "reference-cpu",
        "runs_dir": RUNS_DIR,
        "workers": 2,
    },
}


def task_config(config: dict[str, Any], task: str, **overrides: Any) -> RunConfig:
    """The configuration of `task` at a report size (`overrides` replace any field)."""
    sizes = {} if config["tasks"] is None else {"task_params": config["tasks"][task]}
    return preset(task, config["scale"], **{**config["train"], **sizes, **overrides})


def base_config(config: dict[str, Any]) -> RunConfig:
    """The bijection configuration of a report size (E10's, which E13 reads too)."""
    return task_config(config, "bijection")


def runs_dir(config: dict[str, Any], out: Path) -> Path:
    return Path(config["runs_dir"]) if config["runs_dir"] else out / "runs"


def grid(
    config: dict[str, Any],
    out: Path,
    models: Sequence[str],
    objectives: Sequence[str],
    **run_options: Any,
) -> dict[GridRun, dict[str, Any]]:
    """Train (or reuse) every model x objective x seed of the size's bijection configuration."""
    return run_grid(
        base_config(config),
        config["label"],
        runs_dir(config, out),
        config["seeds"],
        models=models,
        objectives=objectives,
        device=config.get("device", "cpu"),
        progress=progress,
        **run_options,
    )


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


def train_all(
    config: dict[str, Any],
    out: Path,
    configs: Sequence[RunConfig],
    workers: Executor | None,
    **run_options: Any,
) -> None:
    """Train every configuration of an experiment in one batch, longest first.

    The workers stay busy across seeds (a seed's unit alone may hold fewer runs than there are
    workers); the units then read the finished runs from their directories. A killed batch loses
    at most the steps since each running configuration's last checkpoint.
    """
    longest_first = sorted(configs, key=lambda c: -c.steps)
    run_configs(
        longest_first,
        config["label"],
        runs_dir(config, out),
        device=config.get("device", "cpu"),
        progress=progress,
        pool=workers,
        **run_options,
    )


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

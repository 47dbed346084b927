"""Run a grid of wind-tunnel configurations (models x objectives x seeds) in the CLI's directories.

Each configuration runs in `run_dir(runs_dir, config, label)`, the directory that
`implicit-em windtunnel` uses for it, so a grid whose configurations were already run by the
command (with `--scale label`) reuses their results, and an interrupted grid resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from implicit_em.windtunnel.cli import run_dir
from implicit_em.windtunnel.train import MODELS, RunConfig, run

__all__ = ["GridRun", "run_grid"]

T = TypeVar("T")
GridRun = tuple[str, str, int]
"""A grid cell: (model, objective, seed)."""


def _plain(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    yield from items


def run_grid(
    base: RunConfig,
    label: str,
    runs_dir: str | Path,
    seeds: Sequence[int],
    models: Sequence[str] = MODELS,
    objectives: Sequence[str] = ("ce", "sigmoid"),
    device: str = "cpu",
    progress: Callable[..., Iterator[Any]] = _plain,
    threads: int | None = 1,
    **run_options: Any,
) -> dict[GridRun, dict[str, Any]]:
    """Train (or reload) `base` for every model, objective and seed; results by cell.

    `progress(items, desc=..., total=...)` wraps the loop (the report passes its progress bar);
    `run_options` go to `implicit_em.windtunnel.train.run` (`trace_every`,
    `snapshot_every`). `threads`: torch CPU threads while the grid runs (restored after;
    None leaves them): one, as the CLI, since these models are too small to gain from more.
    """
    cells = [(m, o, s) for m in models for o in objectives for s in seeds]
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run_cells(cells, base, label, Path(runs_dir), device, progress, run_options)
    finally:
        torch.set_num_threads(previous)


def _run_cells(
    cells: list[GridRun],
    base: RunConfig,
    label: str,
    runs_dir: Path,
    device: str,
    progress: Callable[..., Iterator[Any]],
    run_options: dict[str, Any],
) -> dict[GridRun, dict[str, Any]]:
    results: dict[GridRun, dict[str, Any]] = {}
    for model, objective, seed in progress(cells, desc=f"wind tunnel {label}", total=len(cells)):
        config = replace(base, model=model, objective=objective, seed=seed)
        result = run(
            config,
            run_dir(runs_dir, config, label),
            device=device,
            progress=False,
            **run_options,
        )
        if result["status"] != "complete":
            raise RuntimeError(f"{model}/{objective} seed {seed} stopped at step {result['steps']}")
        results[(model, objective, seed)] = result
    return results

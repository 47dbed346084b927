"""Run many wind-tunnel configurations in the CLI's directories, one after another or two at once.

Each configuration runs in `run_dirs.run_dir(runs_dir, config, label)`, the directory that
`implicit-em windtunnel` uses for it, so configurations already run by the command (with
`--scale label`) are reused, and an interrupted batch resumes. `workers > 1` trains that many
configurations at once in separate processes (one torch thread each): on a machine with as many
free cores, the wall time divides by about that much; results are the same as one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

import torch

from implicit_em.windtunnel.config import MODELS, RunConfig
from implicit_em.windtunnel.run_dirs import run_dir
from implicit_em.windtunnel.train import run

__all__ = ["GridRun", "run_configs", "run_grid", "worker_pool"]

T = TypeVar("T")
GridRun = tuple[str, str, int]
"""A grid cell: (model, objective, seed)."""


def _plain(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    yield from items


def _one(
    config: RunConfig, label: str, runs_dir: Path, device: str, run_options: dict[str, Any]
) -> dict[str, Any]:
    result = run(
        config, run_dir(runs_dir, config, label), device=device, progress=False, **run_options
    )
    if result["status"] != "complete":
        raise RuntimeError(
            f"{config.task} {config.model}/{config.objective} seed {config.seed} stopped at "
            f"step {result['steps']}"
        )
    return result


def _single_thread() -> None:
    torch.set_num_threads(1)


@contextmanager
def worker_pool(workers: int) -> Iterator[Executor | None]:
    """`workers` processes of one torch thread each for `run_configs(pool=...)`; None for 1."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1:
        yield None
        return
    context = get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_single_thread) as pool:
        yield pool


def run_configs(
    configs: Sequence[RunConfig],
    label: str,
    runs_dir: str | Path,
    device: str = "cpu",
    progress: Callable[..., Iterator[Any]] = _plain,
    threads: int | None = 1,
    workers: int = 1,
    pool: Executor | None = None,
    **run_options: Any,
) -> list[dict[str, Any]]:
    """Train (or reload) every configuration; their results in the same order.

    `progress(items, desc=..., total=...)` wraps the loop (the report passes its progress bar);
    `run_options` go to `implicit_em.windtunnel.train.run`. `threads`: torch CPU threads while
    the configurations run one at a time (restored after; None leaves them): one, as the CLI,
    since these models are too small to gain from more. `workers`: configurations trained at
    once, each in its own process on one thread; or `pool`, an open `worker_pool` to use
    (started once for many calls).
    """
    job = partial(
        _one, label=label, runs_dir=Path(runs_dir), device=device, run_options=run_options
    )
    desc = f"wind tunnel {label}"
    if pool is None and workers > 1:
        with worker_pool(workers) as own:
            return run_configs(configs, label, runs_dir, device, progress, pool=own, **run_options)
    if pool is not None:
        return list(progress(pool.map(job, configs), desc=desc, total=len(configs)))
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return [job(c) for c in progress(configs, desc=desc, total=len(configs))]
    finally:
        torch.set_num_threads(previous)


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
    workers: int = 1,
    **run_options: Any,
) -> dict[GridRun, dict[str, Any]]:
    """Train (or reload) `base` for every model, objective and seed; results by cell.

    The options are those of `run_configs`.
    """
    cells = [(m, o, s) for m in models for o in objectives for s in seeds]
    configs = [replace(base, model=m, objective=o, seed=s) for m, o, s in cells]
    results = run_configs(
        configs, label, runs_dir, device, progress, threads, workers, **run_options
    )
    return dict(zip(cells, results, strict=True))

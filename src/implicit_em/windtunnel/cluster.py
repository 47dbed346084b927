"""Wind-tunnel runs on a Ray cluster: `RayPool`, an executor for `grid.run_configs(pool=...)`.

The reference protocol (`preset(task, "reference")`: 6 layers of width 192, 100k steps) takes
hours per run even on a GPU, and tens of CPU-hours on a CPU, so its grid of tasks, models,
objectives and seeds is work for many GPUs or many nodes. `RayPool` sends each configuration to a
Ray worker as one task asking for `cpus_per_run` CPUs and `gpus_per_run` GPUs; the worker trains
it with `implicit_em.windtunnel.train.run` in its run directory, exactly as `implicit-em
windtunnel` would, and its result comes back. Results are the runs' own: on the same device and
thread count, a configuration trained through the pool equals the one trained alone.

Without an `address` the pool starts its own local Ray instance (whatever cluster the machine
records); `address="auto"` or `"HOST:PORT"` joins a running cluster (see docs/distributed.md).
A request no live node can hold (more CPUs or GPUs per run than any node has) is refused when
the pool starts, where a task would wait for it forever. A task that dies with its worker is
retried. The run directories are where the workers write:
for a run interrupted on one node to resume on another, and for a later `run_configs` to read
finished runs back, `runs_dir` must be on a filesystem every node sees. Ray is the optional
extra `ray`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from implicit_em.arguments import missing_modules
from implicit_em.ray_cluster import connect, largest_node

__all__ = ["RETRIES", "RayPool"]

RETRIES = 2
"""How many times a run whose worker died is started again (from its last checkpoint when the
run directory is shared)."""


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict, threads: int) -> Any:
    """On the worker: `fn(*args, **kwargs)` on `threads` torch threads."""
    import torch

    torch.set_num_threads(threads)
    return fn(*args, **kwargs)


class RayPool(Executor):
    """A `concurrent.futures.Executor` whose calls are Ray tasks (for `run_configs(pool=...)`).

    Parameters
    ----------
    address : str or None, default=None
        None starts a local Ray instance with `num_cpus` CPUs; `"auto"` or `"HOST:PORT"` joins
        a running cluster.
    cpus_per_run : int, default=1
        CPUs (and torch threads) each run asks for.
    gpus_per_run : float, default=0
        GPUs each run asks for (1 with `device="cuda"`: Ray then gives the run its own GPU).
    num_cpus : int or None, default=None
        CPUs of the local instance (None: every core); ignored when joining a cluster.
    """

    def __init__(
        self,
        address: str | None = None,
        cpus_per_run: int = 1,
        gpus_per_run: float = 0,
        num_cpus: int | None = None,
    ) -> None:
        if cpus_per_run < 1:
            raise ValueError(f"cpus_per_run must be >= 1, got {cpus_per_run}")
        if gpus_per_run < 0:
            raise ValueError(f"gpus_per_run must be >= 0, got {gpus_per_run}")
        if missing_modules(["ray"]):
            raise ValueError("RayPool needs Ray: pip install 'implicit-em[ray]'")
        import ray

        self._ray = ray
        self._started = connect(address, num_cpus)
        largest = largest_node(ray.nodes())
        wanted = {"CPU": cpus_per_run, "GPU": gpus_per_run}
        short = [f"{k} {v:g}" for k, v in wanted.items() if v > largest.get(k, 0)]
        if short:
            self.shutdown()
            raise ValueError(
                f"cpus_per_run={cpus_per_run}, gpus_per_run={gpus_per_run:g}: no live node has "
                f"{' and '.join(short)} (the largest has CPU {largest.get('CPU', 0):g}, "
                f"GPU {largest.get('GPU', 0):g}); a run asking for it would wait forever"
            )
        self._threads = cpus_per_run
        self._task = ray.remote(_call).options(
            num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=RETRIES
        )

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Run `fn(*args, **kwargs)` as a Ray task; its future."""
        return self._task.remote(fn, args, kwargs, self._threads).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the local Ray instance this pool started (a joined cluster is left running)."""
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()

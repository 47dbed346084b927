"""Ray for the package's two users, the claims report's `RayExecutor` and the wind tunnel's
`RayPool`: one policy for starting or joining a cluster, and the largest node a task can land on.

`connect(None)` starts a local instance of this machine's cores, whatever cluster the machine
records (a stale `ray_current_cluster` file or `RAY_ADDRESS` would send `"auto"` to a dead head);
`connect("auto")` or `connect("HOST:PORT")` joins a running cluster. Either way the driver's
`PYTHONPATH` travels to the workers, so a checkout run from source imports the same package on
them, and the workers' logs stay out of the driver's output. Ray is the optional extra `ray`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["connect", "largest_node"]


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Start (`address=None`) or join (`"auto"`, `"HOST:PORT"`) Ray, unless this process is
    already connected; True when this call connected it (the caller then shuts it down).

    `num_cpus` (None: every core) sizes a local instance and is ignored when joining. What
    `ray.init` raises (`ConnectionError`, `RuntimeError`, `TimeoutError`) is left to the caller,
    which knows which option to name.
    """
    import ray

    if ray.is_initialized():
        return False
    path = os.environ.get("PYTHONPATH")
    options: dict[str, Any] = {
        "address": address or "local",
        "log_to_driver": False,
        "include_dashboard": False,
        "logging_level": logging.ERROR,
        "runtime_env": {"env_vars": {"PYTHONPATH": path}} if path else None,
    }
    if address is None:
        options["num_cpus"] = num_cpus or os.cpu_count() or 1
    ray.init(**options)
    return True


def largest_node(nodes: list[dict[str, Any]] | None = None) -> dict[str, float]:
    """The most CPUs and GPUs any one live node has, as `{"CPU": c, "GPU": g}` (0 where no
    node has any): a task asking for more would wait forever. `nodes` as `ray.nodes()` gives
    them (default: the connected cluster's)."""
    if nodes is None:
        import ray

        nodes = ray.nodes()
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    return {k: max((r.get(k, 0) for r in alive), default=0) for k in ("CPU", "GPU")}

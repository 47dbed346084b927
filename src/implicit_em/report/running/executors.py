"""Where units are computed: in this process (`local`, the default) or on a Ray cluster (`ray`).

An executor takes units (`implicit_em.report.running.plan.Unit`) and yields each one's `Done` as it
finishes, tagged with its position in the list; the driver (`runner`) keeps the values in the
units' folder and aggregates each experiment when its units are in. Workers need no shared
filesystem: a unit's arguments travel to the worker and its JSON value travels back.

* `LocalExecutor` computes the units one after the other, in order, in this process: the
  report as it always ran, with no dependency beyond the package.
* `RayExecutor` submits every unit as a Ray task asking for its `threads` CPUs (at most a
  node's) and one GPU for a GPU unit when the cluster has one; the worker sets torch's thread count to the unit's
  `threads`. A worker that dies mid-unit is retried on another (`max_retries`); an exception
  raised by the unit is not (it would raise again) and comes back as the unit's error. With
  an `address` it joins a running cluster (`auto`, or `HOST:PORT`); without one it always
  starts its own local Ray instance with one worker per core, whatever cluster the machine
  records (`RAY_ADDRESS`, or the record a `ray start` leaves, which may name a head long gone).
  Ray is the optional extra `ray`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from implicit_em.arguments import missing_modules
from implicit_em.ray_cluster import connect, largest_node
from implicit_em.report.running.plan import Done, Unit, compute

__all__ = [
    "EXECUTORS",
    "Executor",
    "LocalExecutor",
    "RayExecutor",
    "check_executor",
    "make_executor",
]

EXECUTORS = ("local", "ray")

REACH_SECONDS = 5.0
"""How long `check_executor` waits for a `HOST:PORT` address to accept a connection (Ray's own
`init` would wait minutes on an address where nothing answers)."""

AUTH_HINT = (
    "; a cluster started by `ray start` uses token authentication, which an explicit address "
    "needs turned on: RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token "
    "or RAY_AUTH_TOKEN"
)
"""Why joining `HOST:PORT` most often fails: Ray turns token authentication on by itself only
for `auto`, never for an explicit address."""

RETRIES = 3
"""How often Ray reruns a unit whose worker died (a unit that raises is not rerun)."""


class Executor(Protocol):
    """Computes units and says how many of them run at once."""

    name: str

    @property
    def workers(self) -> int:
        """How many units it can run at once."""

    def run(self, units: Sequence[Unit], skip: Callable[[int], bool]) -> Iterator[tuple[int, Done]]:
        """Each unit's `Done` with its index in `units`, as it finishes (`skip(i)`: a unit
        the driver no longer needs, which a lazy executor leaves out)."""

    def busy(self) -> int:
        """How many units are running now."""

    def close(self) -> None:
        """Cancel the units in flight and let go of what it started (its creator calls it once
        the report is written; a Ctrl-C calls it at once)."""


class LocalExecutor:
    """Every unit in this process, in order, one at a time."""

    name = "local"

    @property
    def workers(self) -> int:
        return 1

    def run(self, units: Sequence[Unit], skip: Callable[[int], bool]) -> Iterator[tuple[int, Done]]:
        for index, unit in enumerate(units):
            if skip(index):
                continue
            yield index, compute(unit)

    def busy(self) -> int:
        return 1

    def close(self) -> None:
        return None


def _on_worker(unit: dict[str, Any]) -> dict[str, Any]:
    """A unit computed on a Ray worker with torch pinned to its threads; its `Done` as a dict."""
    import torch

    torch.set_num_threads(unit["threads"])
    done = compute(Unit(**unit))
    return {**done.__dict__, "warnings": list(done.warnings)}


class RayExecutor:
    """Units as Ray tasks on a running cluster (`address`) or on a local instance."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        import ray

        self._ray = ray
        try:
            self._started = connect(address, num_cpus)
        except (ConnectionError, RuntimeError, TimeoutError) as err:
            where = f"--address {address}" if address else "--executor ray"
            reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err)
            hint = "" if address in (None, "auto") else AUTH_HINT
            raise ValueError(
                f"{where}: cannot start or join a Ray cluster ({reason}){hint}"
            ) from err
        self._task = ray.remote(max_retries=RETRIES, retry_exceptions=False)(_on_worker)
        self._refs: dict[Any, int] = {}
        self._cpus: dict[Any, int] = {}

    @property
    def workers(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def run(self, units: Sequence[Unit], skip: Callable[[int], bool]) -> Iterator[tuple[int, Done]]:
        largest = largest_node(self._ray.nodes())
        for index, unit in enumerate(units):
            cpus = max(1, min(unit.threads, int(largest["CPU"])))
            task = self._task.options(
                num_cpus=cpus, num_gpus=1 if unit.gpu and largest["GPU"] >= 1 else 0
            )
            ref = task.remote(unit.as_dict())
            self._refs[ref] = index
            self._cpus[ref] = cpus
        while self._refs:
            ready, _ = self._ray.wait(list(self._refs), num_returns=1)
            index = self._refs.pop(ready[0])
            self._cpus.pop(ready[0], None)
            if skip(index):
                continue
            try:
                found = self._ray.get(ready[0])
                yield index, Done(**{**found, "warnings": tuple(found["warnings"])})
            except self._ray.exceptions.RayError as err:
                unit = units[index]
                yield index, Done(unit.name, None, 0.0, "", "", (), f"{type(err).__name__}: {err}")

    def busy(self) -> int:
        """The units in flight that fit in the cluster's CPUs at once, in the order they were
        sent (an estimate: Ray does not say which tasks run; a unit asking for 2 of 2 CPUs
        runs alone, so it counts as 1 busy of 2)."""
        free, running = self.workers, 0
        for ref in self._refs:
            if self._cpus[ref] > free:
                break
            free -= self._cpus[ref]
            running += 1
        return running

    def close(self) -> None:
        for ref in self._refs:
            self._ray.cancel(ref, force=True)
        self._refs.clear()
        self._cpus.clear()
        if self._started:
            self._ray.shutdown()


def host_and_port(address: str) -> tuple[str, int] | None:
    """`(host, port)` of a `HOST:PORT` (or `ray://HOST:PORT`) address; `None` for `auto`.

    `ValueError` naming `--address` when it is neither.
    """
    if address == "auto":
        return None
    bare = address.removeprefix("ray://")
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--address: expected auto or HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def check_reachable(address: str, seconds: float = REACH_SECONDS) -> None:
    """`ValueError` naming `--address` when nothing accepts a TCP connection at `address`
    within `seconds` (`auto` is left to Ray, which fails at once when no cluster runs here)."""
    where = host_and_port(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=seconds):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ValueError(
            f"--address {address}: nothing answers there ({reason}); "
            "start the head with `ray start --head` and pass the address it prints"
        ) from None


def check_executor(name: str, address: str | None = None) -> None:
    """`ValueError` naming the option when `name` is no executor, when `--address` comes
    without Ray, is malformed or unreachable, or when the Ray extra is not installed."""
    if name not in EXECUTORS:
        raise ValueError(f"--executor: expected one of {', '.join(EXECUTORS)}, got {name!r}")
    if name == "local" and address:
        raise ValueError("--address: only the ray executor joins a cluster")
    if name == "ray" and missing_modules(["ray"]):
        raise ValueError(
            "implicit-em report --executor ray needs ray, which is not installed: "
            "pip install 'implicit-em[ray]'"
        )
    if name == "ray" and address:
        check_reachable(address)


def make_executor(name: str, address: str | None = None) -> Executor:
    """The executor `name` (`local` or `ray`, joining the cluster at `address` if given),
    after `check_executor`."""
    check_executor(name, address)
    return LocalExecutor() if name == "local" else RayExecutor(address)

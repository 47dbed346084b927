"""The report on a Ray cluster of real processes: a head and a second node, each a raylet with
its own worker processes (`ray.cluster_utils.Cluster`, stopped at the end; it stops only the
processes it started). The cluster's numbers equal this process's to the last bit, and a worker
killed in the middle of a unit costs a retry, not a result."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from implicit_em.report import Experiment, Outcome, Unit
from implicit_em.report.rules.protocol import Protocol
from implicit_em.report.running.registry import select
from implicit_em.report.running.runner import run_experiments

ray = pytest.importorskip("ray")

QUIET = {"log": lambda line: None}
SECONDS = 8.0
"""How long the test unit sleeps: long enough to be killed in the middle."""


def draws(seed: int, pid_file: str, seconds: float) -> list[float]:
    """A seeded unit that notes its worker's pid and sleeps before it returns: four float64
    normal draws of `seed`."""
    with open(pid_file, "a", encoding="utf-8") as file:
        file.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(4, generator=generator, dtype=torch.float64).tolist()


def _sleeper(pid_file: Path) -> Experiment:
    def plan(config):
        return [
            Unit(f"seed{s}", draws, {"seed": s, "pid_file": str(pid_file), "seconds": SECONDS})
            for s in config["seeds"]
        ]

    def aggregate(config, results, out):
        values = [results[f"seed{s}"] for s in config["seeds"]]
        return Outcome({"draws": values}, {"x": [min(v) for v in values]})

    return Experiment(
        id="X1",
        title="seeded draws, slowly",
        claims=("C1",),
        hypothesis="h",
        setup="s",
        plan=plan,
        aggregate=aggregate,
        protocol=Protocol.from_data(
            {
                "id": "X1",
                "criteria": [
                    {
                        "number": "x",
                        "op": "<=",
                        "threshold": 10.0,
                        "means": "small",
                        "claim": "C1",
                        "direction": "supports",
                        "primary": True,
                    }
                ],
                "sizes": {
                    "smoke": {"seeds": [0, 1]},
                    "quick": {"seeds": [0, 1]},
                    "full": {"seeds": [1000, 1001]},
                    "control": {"seeds": [0, 1]},
                },
            }
        ),
        headline=("x",),
        meaning={"holds": "a", "partly": "b", "fails": "c"},
        minutes={"smoke": 0, "quick": 0, "full": 0},
    )


def _kill_first_worker(pid_file: Path, killed: list[int]) -> None:
    """SIGKILL the worker that first notes its pid in `pid_file` (in the middle of its unit)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if pid_file.is_file() and pid_file.read_text().strip():
            pid = int(pid_file.read_text().split()[0])
            time.sleep(1.0)  # well inside the unit's sleep
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.05)


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    """A head node and a second node with one CPU each; the test units' module importable by
    their workers."""
    from ray.cluster_utils import Cluster

    here = str(Path(__file__).parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    # Ray's sockets live under its temp folder, and a socket's path has at most 107 bytes.
    temp = tempfile.mkdtemp(prefix="iem-ray-", dir="/tmp")
    started = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "temp_dir": temp},
    )
    started.add_node(num_cpus=1)
    started.wait_for_nodes()
    yield started
    if ray.is_initialized():
        ray.shutdown()
    started.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def _numbers(results):
    return {
        r.experiment.id: (r.judgement.verdict, r.outcome.numbers, r.outcome.samples)
        for r in results
    }


@pytest.mark.slow
def test_a_ray_cluster_gives_the_local_numbers_and_survives_a_killed_worker(cluster, tmp_path):
    from implicit_em.report.running.executors import RayExecutor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each Ray worker runs its one-thread units
    try:
        experiments = [*select(["E1", "E2"]), _sleeper(tmp_path / "local.pids")]
        local = run_experiments(experiments, "smoke", tmp_path / "local", **QUIET)
    finally:
        torch.set_num_threads(threads)
    pid_file = tmp_path / "ray.pids"
    experiments = [*select(["E1", "E2"]), _sleeper(pid_file)]
    killed: list[int] = []
    killer = threading.Thread(target=_kill_first_worker, args=(pid_file, killed))
    killer.start()
    executor = RayExecutor(address=cluster.address)
    assert executor.workers == 2
    on_ray = run_experiments(experiments, "smoke", tmp_path / "ray", executor=executor, **QUIET)
    killer.join()
    assert killed, "no worker was killed"
    pids = [int(p) for p in pid_file.read_text().split()]
    assert killed[0] in pids and len(pids) == 3  # two units, one of them run again
    assert _numbers(on_ray) == _numbers(local)  # to the last bit
    assert all(r.judgement.verdict != "not run" for r in on_ray)
    assert os.getpid() not in pids  # the units ran in the workers, not here
    sleeper = on_ray[-1].units
    assert sleeper["count"] == 2 and sum(w["units"] for w in sleeper["where"].values()) == 2
    for result in on_ray:  # each unit's CPU time and machine line came back from its worker
        units = result.units
        assert units["cpu_units"] == units["count"] and units["cpu_seconds"] >= 0
        assert units["machines"] and all("machine" in r for r in units["each"].values())


@pytest.fixture
def head(free_port):
    """A Ray head started as a user starts one (`ray start --head`, with `--block` so that it
    stays this fixture's own process, in its own session), stopped at the end by signalling that
    process alone: it takes down what it started and no other Ray instance on the machine (a
    `ray stop` would stop every one of them, a user's running report included)."""
    ray_cli = Path(sys.executable).with_name("ray")
    port = free_port
    start = [str(ray_cli), "start", "--head", "--block", f"--port={port}", "--num-cpus=1"]
    start += ["--include-dashboard=false", "--disable-usage-stats"]
    process = subprocess.Popen(
        start, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _wait_for_port(port, process)
        yield port
    finally:
        process.terminate()  # --block: on SIGTERM it stops every process it started
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        _forget_the_head(port)


def _forget_the_head(port: int) -> None:
    """Remove Ray's record of the current cluster when it names this head (as `ray stop`
    does): left behind, it would send a later `ray.init()` on this machine to a dead head."""
    record = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    try:
        if record.read_text().strip().endswith(f":{port}"):
            record.unlink()
    except OSError:
        pass


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until something listens on 127.0.0.1:`port` (the head's GCS); fails if the head exits."""
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "ray start --head exited before it listened"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"ray start --head did not listen on port {port} in {timeout:.0f} s")


def _report(out: Path, *args: str, env: dict | None = None) -> dict:
    cli = Path(sys.executable).with_name("implicit-em")
    cmd = [str(cli), "report", "--smoke", "--only", "E1", "--out", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    entry = json.loads((out / "results.json").read_text())["experiments"][0]
    return {"numbers": entry["numbers"], "verdict": entry["verdict"]}


@pytest.mark.slow
def test_the_cli_joins_a_cluster_started_with_ray_start(head, tmp_path):
    local = _report(tmp_path / "local")
    assert _report(tmp_path / "auto", "--executor", "ray", "--address", "auto") == local
    token = {**os.environ, "RAY_AUTH_MODE": "token"}
    address = f"127.0.0.1:{head}"
    joined = _report(tmp_path / "host", "--executor", "ray", "--address", address, env=token)
    assert joined == local


@pytest.mark.slow
def test_without_an_address_the_report_starts_its_own_ray_whatever_the_machine_records(
    free_port, tmp_path
):
    """`--executor ray` alone starts its own local instance: a machine whose records name a head
    that is gone (`RAY_ADDRESS`, and the `ray_current_cluster` file a `ray start` leaves) does
    not send it there. Ray's temp folder is this test's own, so no other Ray on the machine is
    touched."""
    temp = Path(tempfile.mkdtemp(prefix="iem-ray-", dir="/tmp"))  # sockets: 107 bytes at most
    try:
        dead = f"127.0.0.1:{free_port}"
        (temp / "ray").mkdir()
        (temp / "ray" / "ray_current_cluster").write_text(dead + "\n")
        env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_ADDRESS": dead}
        local = _report(tmp_path / "local")
        assert _report(tmp_path / "ray", "--executor", "ray", env=env) == local
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_busy_counts_the_units_that_fit_in_the_cpus_at_once(monkeypatch, tmp_path):
    """On a local instance of 2 CPUs, units declaring 2 threads run one at a time and units of
    one thread two at a time; `busy` says so (it had counted every unit in flight up to the
    CPUs, so one 2-thread unit read as 2 of 2 busy)."""
    from implicit_em.report.running.executors import RayExecutor

    here = str(Path(__file__).parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    temp = tempfile.mkdtemp(prefix="iem-ray-", dir="/tmp")  # sockets: 107 bytes at most
    monkeypatch.setenv("RAY_TMPDIR", temp)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    executor = RayExecutor(num_cpus=2)
    try:
        assert executor.workers == 2
        for threads, running in ((2, 1), (1, 2)):
            pid_file = tmp_path / f"pids-{threads}"
            units = [
                Unit(
                    f"seed{s}",
                    draws,
                    {"seed": s, "pid_file": str(pid_file), "seconds": 0.5},
                    threads=threads,
                )
                for s in range(4)
            ]
            stream = executor.run(units, lambda index: False)
            first = [next(stream)]  # 3 units are still in flight
            assert executor.busy() == running
            rest = list(stream)
            assert executor.busy() == 0
            done = sorted(first + rest)
            assert [i for i, _ in done] == [0, 1, 2, 3]
            assert all(d.error is None for _, d in done), [d.error for _, d in done]
    finally:
        executor.close()
        shutil.rmtree(temp, ignore_errors=True)

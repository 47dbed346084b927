"""The claims report's executors side by side, in one run: the same smoke-size experiments in
this process (``local``) and on a local Ray cluster of two workers (``ray``).

Each executor runs the experiments from an empty output folder (nothing cached), so every unit
is computed. Printed: the machine line, the units, each executor's wall time (Ray's start
apart), their ratio, whether the two reports hold the same numbers, and Ray's overhead per
unit, measured on a unit that does nothing (``plan.check_name``): the round trip of one unit at
a time (submit, run on a worker, value back), and the time per unit when many are in flight.

Ray's workers run each unit on one thread (the unit's ``threads``); the local executor runs on
torch's default threads, so the local numbers may differ from Ray's in the last bits of
multi-threaded reductions (the test suite checks bit equality with one thread on both sides).

    PYTHONPATH=src python benchmarks/report_executors.py [--only E1,E2,E3,E4,E5] [--workers 2]
        [--trivial 40]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from implicit_em.machine import summary
from implicit_em.report.running.executors import LocalExecutor, RayExecutor
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import select
from implicit_em.report.running.runner import run_experiments


def _report(executor, ids: list[str], out: Path) -> tuple[float, dict]:
    """Wall seconds of a smoke report of `ids` into `out`, and its numbers by experiment."""
    start = time.perf_counter()
    results = run_experiments(select(ids), "smoke", out, executor=executor, log=lambda s: None)
    seconds = time.perf_counter() - start
    numbers = {
        r.experiment.id: (r.outcome and (r.outcome.numbers, r.outcome.samples)) for r in results
    }
    return seconds, numbers


def _overhead(executor: RayExecutor, count: int) -> tuple[float, float]:
    """Seconds per trivial unit: one at a time (round trip), and `count` in flight at once."""
    trivial = [
        Unit(f"noop{i}", "implicit_em.report.running.plan:check_name", {"name": "x"})
        for i in range(count)
    ]
    start = time.perf_counter()
    for unit in trivial:
        list(executor.run([unit], lambda i: False))
    serial = (time.perf_counter() - start) / count
    start = time.perf_counter()
    list(executor.run(trivial, lambda i: False))
    return serial, (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="E1,E2,E3,E4,E5")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trivial", type=int, default=40)
    args = parser.parse_args()
    ids = [i.strip() for i in args.only.split(",") if i.strip()]
    units = sum(len(e.plan({**e.configs["smoke"], "device": "cpu"})) for e in select(ids))
    print(summary())
    print(f"smoke size, {', '.join(ids)}: {units} units, nothing cached")
    with tempfile.TemporaryDirectory() as folder:
        local_s, local_numbers = _report(LocalExecutor(), ids, Path(folder) / "local")
        start = time.perf_counter()
        ray = RayExecutor(num_cpus=args.workers)
        started = time.perf_counter() - start
        ray_s, ray_numbers = _report(ray, ids, Path(folder) / "ray")
        serial, in_flight = _overhead(ray, args.trivial)
        ray.close()
    same = "yes" if ray_numbers == local_numbers else "no (last-bit differences, see the docstring)"
    print(f"{'executor':<28}{'wall (s)':>10}")
    print(f"{'local (this process)':<28}{local_s:>10.1f}")
    print(f"{f'ray ({args.workers} workers)':<28}{ray_s:>10.1f}   (+ {started:.1f} s to start Ray)")
    print(
        f"ratio local / ray: {local_s / ray_s:.2f}x (start excluded), {local_s / (ray_s + started):.2f}x (included)"
    )
    print(f"same numbers: {same}")
    print(
        f"Ray's overhead per unit (a unit doing nothing, {args.trivial} units): "
        f"{1000 * serial:.1f} ms one at a time (round trip), {1000 * in_flight:.1f} ms each "
        "with all in flight"
    )


if __name__ == "__main__":
    main()

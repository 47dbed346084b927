"""Wind tunnel: training steps per second of each model on each task, at a report size.

Times `--steps` training steps (after a few untimed ones) of every model on every task of the
report's E10 protocol at `--size` (`quick` or `full`), on one torch thread, and one
held-out evaluation. The report's step caps and time estimates are sized from these figures.

    python benchmarks/windtunnel_throughput.py --size quick
    python benchmarks/windtunnel_throughput.py --size full --steps 100
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
from windtunnel_common import step_costs

from implicit_em.machine import summary
from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.rules.protocol import load_protocol
from implicit_em.windtunnel.config import MODELS

_UNTIMED = 5


def _rate(config, steps: int) -> tuple[float, float]:
    """Steps per second of `config`'s training, and seconds of one held-out evaluation."""
    per_step, evaluation = step_costs(config, steps, _UNTIMED, time.perf_counter)
    return 1.0 / per_step, evaluation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="quick", choices=["quick", "full"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tasks", default=",".join(wt.TASKS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(summary("cpu"))
    print(f"{args.size} size, one thread, {args.steps} timed steps")
    print(f"{'task':<10} {'model':<12} {'steps/s':>8} {'eval s':>7}")
    config = load_protocol("E10").sizes[args.size]
    for task in args.tasks.split(","):
        for model in args.models.split(","):
            rate, ev = _rate(replace(wt.task_config(config, task), model=model), args.steps)
            print(f"{task:<10} {model:<12} {rate:8.1f} {ev:7.3f}")


if __name__ == "__main__":
    main()

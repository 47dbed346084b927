"""Wind tunnel: training steps per second of 10 seeds trained together, against one after another.

The `reference-cpu` scale's transformer (or `--model`, an MLP matched to it) on the bijection
(V = 20, L = 19, batch 64, RMSNorm), on one torch thread. Each repeat times `--steps` training steps (after `--warmup` untimed ones)
of every seed, two ways, in alternating order (ABAB... so that a shared machine's drift falls
on both):

* together: `seeds.train_seeds`' step, the seeds' models stacked and run by one `vmap` (with
  `--compile`, a third way: the same step with the forward compiled by `torch.compile`, timed
  after its compilation);
* one after another: `train.run`'s step, each seed's model alone, seed after seed.

Printed: the machine, the load (`/proc/loadavg`), and for each way the median over repeats of
seed-steps per second (one training step of one seed; 10 seeds together at S steps/s make
10 S seed-steps/s), with the range, and the ratio of the medians.

    PYTHONPATH=src python benchmarks/windtunnel_seeds.py [--seeds 10] [--steps 10] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from implicit_em.machine import summary
from implicit_em.windtunnel.config import MODELS, RunConfig, build_model, preset
from implicit_em.windtunnel.models import count_parameters
from implicit_em.windtunnel.optim import make_optimizer
from implicit_em.windtunnel.seeds import _Seed, _train_step
from implicit_em.windtunnel.stacked import StackedModel, parameter_groups
from implicit_em.windtunnel.stacked_optim import StackedAdamW
from implicit_em.windtunnel.train import _train_step as _train_one


def _together(config: RunConfig, seeds: list[int], compile: bool) -> Callable[[int], None]:
    """`steps -> None`: that many steps of all `seeds`, stacked."""
    task = config.make_task()
    model = StackedModel(config, task, seeds, compile=compile)
    optimizer = StackedAdamW(model.params, parameter_groups(config, list(model.params)))
    state = [_Seed(config, s, "cpu") for s in seeds]
    done = 0

    def train(steps: int) -> None:
        nonlocal done
        for _ in range(steps):
            _train_step(model, optimizer, task, config, state, done, "cpu")
            done += 1

    return train


def _one_after_another(config: RunConfig, seeds: list[int]) -> Callable[[int], None]:
    """`steps -> None`: that many steps of each seed's own model, seed after seed."""
    task = config.make_task()
    runs = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = build_model(config, task)
        runs.append((model, make_optimizer(model, config), torch.Generator().manual_seed(seed)))
    done = 0

    def train(steps: int) -> None:
        nonlocal done
        for model, optimizer, data in runs:
            for step in range(done, done + steps):
                batch = task.sample(config.batch_size, data)
                _train_one(model, optimizer, batch, config, step, None)
        done += steps

    return train


def _seconds(train: Callable[[int], None], steps: int) -> float:
    start = time.perf_counter()
    train(steps)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default="transformer", choices=list(MODELS))
    parser.add_argument("--compile", action="store_true", help="also time the compiled forward")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = preset("bijection", "reference-cpu", model=args.model)
    seeds = list(range(args.seeds))
    ways = {
        "together": _together(config, seeds, compile=False),
        "one after another": _one_after_another(config, seeds),
    }
    if args.compile:
        ways["together, compiled"] = _together(config, seeds, compile=True)
    print(summary("cpu"))
    print(f"load average (1, 5, 15 min): {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    n_parameters = count_parameters(build_model(config, config.make_task()))
    print(
        f"reference-cpu bijection, {config.model} ({n_parameters:,} parameters), batch "
        f"{config.batch_size}, {args.seeds} seeds, {args.steps} timed steps, "
        f"{args.repeats} alternated repeats"
    )
    for train in ways.values():
        train(args.warmup)
    rates: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, train in ways.items():
            rates[name].append(args.seeds * args.steps / _seconds(train, args.steps))
    base = statistics.median(rates["one after another"])
    print(f"{'way':<20} {'seed-steps/s':>12} {'range':>15} {'vs one after another':>21}")
    for name, values in rates.items():
        median = statistics.median(values)
        spread = f"{min(values):.1f}-{max(values):.1f}"
        print(f"{name:<20} {median:12.1f} {spread:>15} {median / base:20.2f}x")


if __name__ == "__main__":
    main()

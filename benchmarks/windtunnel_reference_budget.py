"""Wind tunnel: CPU-seconds per training step of each reference-budget arm, and its CPU-hours.

For every arm of E10's `reference_budget` block at `--size` (full: the reference's data budget),
and for the reference's own models (`preset(task, "reference")`: 6 x 192 on the bijection,
9 x 256 on the HMM with markers), times `--steps` training steps (after a few untimed ones) on one
torch thread in process CPU time, and one held-out evaluation; prints the CPU-seconds per step,
the steps and evaluations a run of the arm makes, and the projected CPU-hours per seed,
$S\\,c_\\text{step} + (S / e + 1)\\,c_\\text{eval}$, with the machine line. On a shared machine the
process time still counts only this process's work, but caches and memory bandwidth are shared:
the figures are upper bounds there.

    python benchmarks/windtunnel_reference_budget.py
    python benchmarks/windtunnel_reference_budget.py --steps 50 --arms hmm-4x128,bijection-2x64
"""

from __future__ import annotations

import argparse
import time

import torch
from windtunnel_common import step_costs

from implicit_em.machine import summary
from implicit_em.report.experiments import _reference_budget as rb
from implicit_em.report.rules.protocol import load_protocol
from implicit_em.windtunnel.config import RunConfig, build_model, preset

_UNTIMED = 3


def cpu_costs(config: RunConfig, steps: int) -> tuple[float, float]:
    """CPU-seconds per training step of `config`, and of one held-out evaluation."""
    return step_costs(config, steps, _UNTIMED, time.process_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full", choices=["quick", "full"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--arms", default="", help="comma-separated arms (default: all)")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference's models")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = load_protocol("E10").sizes[args.size]
    arms = args.arms.split(",") if args.arms else list(config["reference_budget"]["arms"])
    runs = {arm: rb.arm_config(config, arm, 0) for arm in arms}
    if not args.no_reference:
        runs |= {f"reference {task}": preset(task, "reference") for task in ("bijection", "hmm")}
    print(summary("cpu"))
    print(f"E10 {args.size} reference-budget arms, one thread, {args.steps} timed steps each")
    header = (
        f"{'arm':<20} {'model':<12} {'L x d':>7} {'params':>9} {'batch':>5} {'steps':>7} "
        f"{'CPU-s/step':>10} {'eval CPU-s':>10} {'CPU-h/seed':>10}"
    )
    print(header)
    for arm, run in runs.items():
        per_step, per_eval = cpu_costs(run, args.steps)
        evaluations = run.steps // run.eval_every + 1
        hours = (run.steps * per_step + evaluations * per_eval) / 3600
        n = sum(p.numel() for p in build_model(run, run.make_task()).parameters())
        print(
            f"{arm:<20} {run.model:<12} {f'{run.n_layer}x{run.n_embd}':>7} {n:>9,} "
            f"{run.batch_size:>5} {run.steps:>7} {per_step:>10.4f} {per_eval:>10.2f} {hours:>10.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

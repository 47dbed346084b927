"""Wind tunnel: our transformer/MLP x CE/sigmoid errors beside the published anchors.

Runs (or reuses, from the same directories as ``implicit-em windtunnel --compare``) the four
configurations of a task at a scale, then prints bits MAE and KL with the published figures of
Agarwal, Dalal and Misra (2025) beside them: bijection (V = 20, 6 x 192, 100k steps)
transformer 0.007 bits, MLP 1.85 bits; HMM filtering transformer 7.5e-5 bits. The anchors are
for the paper scale; at the CPU scales they are a reference point, not a like-for-like baseline.

    python benchmarks/windtunnel_anchors.py                           # bijection, default scale
    python benchmarks/windtunnel_anchors.py --task hmm
    python benchmarks/windtunnel_anchors.py --scale paper --device cuda
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch

from implicit_em.windtunnel.cli import run_dir
from implicit_em.windtunnel.train import preset, run

PUBLISHED = {
    ("bijection", "transformer"): 0.007,
    ("bijection", "mlp"): 1.85,
    ("hmm", "transformer"): 7.5e-5,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="bijection", choices=["bijection", "hmm", "dice"])
    parser.add_argument("--scale", default="default", choices=["quick", "default", "paper"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("outputs/windtunnel"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = preset(args.task, args.scale, seed=args.seed)
    header = (
        f"{'model':<12} {'objective':<9} {'bits MAE':>10} {'KL bits':>10} {'published MAE':>14} "
        f"{'params':>9} {'wall s':>7}"
    )
    print(f"{args.task}, {args.scale} scale, {base.task_params}\n{header}\n{'-' * len(header)}")
    for model in ("transformer", "mlp"):
        for objective in ("ce", "sigmoid"):
            config = replace(base, model=model, objective=objective)
            r = run(config, run_dir(args.out, config, args.scale), device=args.device)
            anchor = PUBLISHED.get((args.task, model)) if objective == "ce" else None
            published = "-" if anchor is None else f"{anchor:g}"
            print(
                f"{model:<12} {objective:<9} {r['bits_mae']:>10.5f} {r['kl_bits']:>10.5f} "
                f"{published:>14} {r['n_parameters']:>9,} {r['wall_time_s']:>7.0f}"
            )


if __name__ == "__main__":
    main()

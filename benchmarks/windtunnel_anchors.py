"""Wind tunnel: our 3 x 2 table (three models x CE / sigmoids) beside the published anchors.

Runs (or reuses, from the same directories as ``implicit-em windtunnel --compare``) the six
configurations of a task at a scale, then prints bits MAE and KL, the parameter counts and the
training time, with the published figures and the analytic context-free floor beside them.
Published (bijection V = 20, L = 19, 6 x 192, 100k steps): transformer 0.007 bits, MLP 1.85 bits
(a position-wise MLP: the with-replacement context-free floor is 1.849 bits, the
without-replacement one 1.107); HMM filtering: transformer 7.5e-5 bits. The anchors are for the
reference scale; at the CPU scales they are a reference point, not a like-for-like baseline.

    python benchmarks/windtunnel_anchors.py --scale reference-cpu       # the docs' table
    python benchmarks/windtunnel_anchors.py --task hmm --scale default
    python benchmarks/windtunnel_anchors.py --scale reference --device cuda
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch

from implicit_em.machine import summary
from implicit_em.windtunnel.run_dirs import run_dir
from implicit_em.windtunnel.train import MODELS, SCALES, preset, run

PUBLISHED = {
    ("bijection", "transformer"): 0.007,
    ("bijection", "mlp-pos"): 1.85,
    ("hmm", "transformer"): 7.5e-5,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="bijection", choices=["bijection", "hmm", "dice"])
    parser.add_argument("--scale", default="reference-cpu", choices=list(SCALES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("outputs/windtunnel"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(summary(args.device))
    base = preset(args.task, args.scale, seed=args.seed)
    floor = getattr(base.make_task(), "context_free_bits", None)
    header = (
        f"{'model':<12} {'objective':<9} {'bits MAE':>10} {'KL bits':>10} {'published':>10} "
        f"{'floor':>7} {'params':>9} {'train s':>8}"
    )
    print(f"{args.task}, {args.scale} scale, {base.task_params}, {base.targets} targets")
    print(f"{header}\n{'-' * len(header)}")
    for model in MODELS:
        for objective in ("ce", "sigmoid"):
            config = replace(base, model=model, objective=objective)
            r = run(config, run_dir(args.out, config, args.scale), device=args.device)
            anchor = PUBLISHED.get((args.task, model)) if objective == "ce" else None
            published = "-" if anchor is None else f"{anchor:g}"
            shown_floor = "-" if floor is None else f"{floor:.4f}"
            print(
                f"{model:<12} {objective:<9} {r['bits_mae']:>10.5f} {r['kl_bits']:>10.5f} "
                f"{published:>10} {shown_floor:>7} {r['n_parameters']:>9,} "
                f"{r['wall_time_s']:>8.0f}"
            )


if __name__ == "__main__":
    main()

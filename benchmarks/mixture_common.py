"""What the mixture benchmarks share: the data, the common start, timing helpers, memory
readings, the GEMM-only pass, and one subprocess per configuration.

The scripts import it from their own folder (`python benchmarks/<script>.py` puts the folder
on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def common_start(x: np.ndarray, k: int, covariance_type: str, seed: int) -> dict:
    """Common start: K random rows as means, uniform weights, the data's variances."""
    rng = np.random.default_rng(seed)
    means = x[rng.choice(len(x), k, replace=False)]
    var = x[:100_000].var(axis=0)
    precisions = {
        "diag": np.tile(1 / var, (k, 1)),
        "spherical": np.full(k, 1 / var.mean()),
        "full": np.tile(np.diag(1 / var), (k, 1, 1)),
        "tied": np.diag(1 / var),
    }[covariance_type]
    return {"weights_init": np.full(k, 1 / k), "means_init": means, "precisions_init": precisions}


def blob_data(n: int, d: int, k: int, seed: int) -> np.ndarray:
    from sklearn.datasets import make_blobs

    x, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=2.0, random_state=seed)
    return x


def best_seconds(work, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - t)
    return best


def quartiles(values: list[float]) -> tuple[float, float, float]:
    low, median, high = np.percentile(values, [25, 50, 75])
    return float(median), float(low), float(high)


def gemm_seconds(n: int, d: int, k: int, cov: str, rows: int) -> tuple[float, float]:
    """Seconds and FLOPs of one pass's GEMMs alone, float32, in chunks of ``rows``.

    full: the E-step's batched ``[B, D+1] @ [K, D+1, D]`` into ``[K, B, D]`` (``[K·D, D+1] @
    [D+1, B]`` below 16 features) and the M-step's batched ``[K, D, B] @ [K, B, D]``
    (``4 N K D^2`` FLOPs); diag: the E-step's ``[K, 2D] @ [2D, B]`` of the row features
    ``[y, y^2]`` and the M-step's ``[K, B] @ [B, 2D]`` (``8 N D K``).
    """
    import torch

    from implicit_em.mixture.covariance.full import FEATURES_LAST_FROM

    if cov == "full" and d >= FEATURES_LAST_FROM:
        augmented, factors = torch.randn(rows, d + 1), torch.randn(k, d + 1, d)
        z = torch.empty(k, rows, d)

        def chunk() -> None:
            torch.bmm(augmented.expand(k, rows, d + 1), factors, out=z)
            torch.bmm(z.mT, z)

        flops = 4 * n * k * d * d
    elif cov == "full":
        stacked, augmented = torch.randn(k * d, d + 1), torch.randn(rows, d + 1)
        z = torch.empty(k * d, rows)

        def chunk() -> None:
            torch.mm(stacked, augmented.T, out=z)
            w = z.view(k, d, rows)
            torch.bmm(w, w.mT)

        flops = 4 * n * k * d * d
    else:
        features, weights = torch.randn(rows, 2 * d), torch.randn(k, 2 * d)
        logits = torch.empty(k, rows)
        r = torch.rand(k, rows).T

        def chunk() -> None:
            torch.mm(weights, features.T, out=logits)
            r.T @ features

        flops = 8 * n * d * k
    chunks = max(n // rows, 1)

    def one_pass() -> None:
        for _ in range(chunks):
            chunk()

    return best_seconds(one_pass), flops


def spawn(script: str, spec: dict) -> dict:
    """Run `script --child SPEC` in a fresh process with every library's threads set to
    `spec["threads"]`; its last stdout line, parsed as JSON (or `{"error": ...}`)."""
    threads = str(spec["threads"])
    env = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }
    out = subprocess.run(
        [sys.executable, script, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def script_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every mixture benchmark takes: `--threads`, `--only` and the hidden
    `--child` of `spawn`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2, help="threads for every library")
    parser.add_argument("--only", choices=["diag", "full"], help="only this covariance type")
    return parser


def ran_as_child(args: argparse.Namespace, child: Callable[[dict], dict]) -> bool:
    """As a `spawn` child, print `child(spec)` as JSON and say so; else set the threads every
    child runs with and print the machine line first (CPU model, instruction set, BLAS of
    numpy and of torch, threads)."""
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return True
    import torch

    from implicit_em.machine import summary

    torch.set_num_threads(args.threads)
    print(f"machine: {summary()}")
    return False

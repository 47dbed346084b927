"""em / preconditioned / gd / adam: passes and seconds to reach EM's final log-likelihood.

EM is first run to convergence from a common poor start (random rows as means, the data's
variances); each fitter then starts from the same parameters and we report the first pass whose
mean log-likelihood per sample is within 1e-3 nats of EM's final value, with the elapsed time.

    python benchmarks/mixture_fitters.py            # N = 100k, D = 8, K = 5
    python benchmarks/mixture_fitters.py --quick    # N = 5k
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning

from implicit_em.mixture import GaussianMixture

TOLERANCE = 1e-3
# Learning rates tried in order until the fit does not diverge (the first that works is shown).
LEARNING_RATES = {"gd": [1.0, 0.5, 0.2, 0.1, 0.05], "adam": [0.1, 0.05, 0.02]}


def _start(x: np.ndarray, k: int, covariance_type: str) -> dict:
    rng = np.random.default_rng(1)
    var = x.var(axis=0)
    precisions = {"diag": np.tile(1 / var, (k, 1)), "full": np.tile(np.diag(1 / var), (k, 1, 1))}
    return {
        "weights_init": np.full(k, 1 / k),
        "means_init": x[rng.choice(len(x), k, replace=False)],
        "precisions_init": precisions[covariance_type],
    }


def _trace(x: np.ndarray, k: int, fitter: str, max_iter: int, tol: float, **kwargs) -> list[tuple]:
    trace: list[tuple] = []
    t0 = time.perf_counter()

    def record(n_iter: int, log_likelihood: float) -> None:
        trace.append((n_iter, time.perf_counter() - t0, log_likelihood))

    gm = GaussianMixture(k, fitter=fitter, max_iter=max_iter, tol=tol, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            gm.fit(x, callback=record)
        except ValueError as err:
            trace.append((None, time.perf_counter() - t0, str(err)))
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["diag", "full"], help="one covariance type")
    args = parser.parse_args()
    torch.set_num_threads(2)
    n, d, k = (5_000, 4, 3) if args.quick else (100_000, 8, 5)
    budgets = {"em": 500, "preconditioned": 500, "gd": 3000, "adam": 3000}
    if args.quick:
        budgets = {"em": 300, "preconditioned": 300, "gd": 1500, "adam": 1500}
    x, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=1.0, random_state=0)
    print(f"N={n} D={d} K={k}, well-separated blobs; target: EM's final mean log-likelihood")
    header = f"{'cov':<5} {'fitter':<15} {'passes':>7} {'seconds':>8} {'final LL':>11} {'gap':>9}"
    for covariance_type in [args.only] if args.only else ["diag", "full"]:
        common = {"covariance_type": covariance_type, **_start(x, k, covariance_type)}
        em_trace = _trace(x, k, "em", 1000, 1e-12, **common)
        target = em_trace[-1][2]
        print(
            f"\n{covariance_type}: EM's final mean log-likelihood {target:.6f} "
            f"after {len(em_trace)} passes"
        )
        print(header)
        for fitter, budget in budgets.items():
            for lr in LEARNING_RATES.get(fitter, [None]):
                trace = _trace(x, k, fitter, budget, 1e-10, learning_rate=lr, **common)
                if trace and trace[-1][0] is None:
                    print(f"{covariance_type:<5} {fitter:<15} lr={lr}: {trace[-1][2][:70]}...")
                    continue
                break
            else:
                continue
            if lr is not None:
                fitter = f"{fitter} lr={lr}"
            hit = next((row for row in trace if abs(row[2] - target) <= TOLERANCE), None)
            final = trace[-1][2]
            if hit is None:
                print(
                    f"{covariance_type:<5} {fitter:<15} {'>' + str(budget):>7} "
                    f"{trace[-1][1]:>8.2f} {final:>11.6f} {final - target:>9.1e}"
                )
            else:
                print(
                    f"{covariance_type:<5} {fitter:<15} {hit[0]:>7} {hit[1]:>8.2f} "
                    f"{final:>11.6f} {final - target:>9.1e}"
                )


if __name__ == "__main__":
    main()

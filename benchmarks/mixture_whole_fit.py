"""Whole fits of GaussianMixture (em) against scikit-learn, initialization included.

At (N, 32, 16) for diag and full (N = 100,000 by default; ``--rows`` for others, e.g.
``--rows 100000 1000000``), float64 input with ``means_init`` alone, so that both libraries
run their k-means start, on every row (the default of both), ``tol=0``, 20 passes,
scikit-learn in float64 against ours with ``dtype="float32"``: 20-pass and 1-pass fits of each
library alternated ``--repeats`` times (default 5) in one process, each timed fit after an
untimed pause of ``SETTLE_SECONDS`` (numpy's OpenBLAS threads keep spinning for a while after
scikit-learn's last BLAS call and take a core from the fit that follows: measured on a 2-core
Xeon, our 1-pass fit took 0.10 s right after a scikit-learn fit and 0.065 s after a 0.3 s
pause; scikit-learn's after ours, 0.22 and 0.21 s), printed as medians with their
interquartile ranges; the pass-against-pass ratio ((20-pass - 1-pass) / 19, medians); our
initialization (the 1-pass fit); and the roofline fraction, the time of our pass's GEMMs alone
(float32, the same chunks) over our pass. The machine line comes first: the CPU model, its
instruction set, and the BLAS of numpy (scikit-learn's) and of torch (ours).

    python benchmarks/mixture_whole_fit.py [--rows N [N ...]] [--repeats R] [--only diag|full]
"""

from __future__ import annotations

import time
import warnings

from mixture_common import (
    blob_data,
    common_start,
    gemm_seconds,
    quartiles,
    ran_as_child,
    script_parser,
    spawn,
)

SETTLE_SECONDS = 0.5
"""Untimed pause before each timed fit of the whole-fit table (see the module docstring)."""


def whole_one(spec: dict) -> dict:
    """Whole fits, initialization included, alternated in this process: scikit-learn on the
    float64 array, ours with ``dtype="float32"`` on the same float64 array (its conversion
    timed), both from ``means_init`` alone (so both run their k-means initialization),
    ``tol=0``; ``passes``-pass and 1-pass fits of each, ``repeats`` rounds."""
    import torch
    from sklearn.mixture import GaussianMixture as SkGaussianMixture

    from implicit_em.mixture import GaussianMixture
    from implicit_em.mixture.fitting import default_chunk_rows

    torch.set_num_threads(spec["threads"])
    warnings.simplefilter("ignore")
    n, d, k, cov, passes = spec["n"], spec["d"], spec["k"], spec["covariance_type"], spec["iters"]
    x = blob_data(n, d, k, seed=0)
    means = common_start(x, k, cov, seed=1)["means_init"]
    kwargs = {"covariance_type": cov, "tol": 0.0, "means_init": means, "random_state": 0}
    fits = {
        "sklearn": lambda m: SkGaussianMixture(k, max_iter=m, **kwargs).fit(x),
        "ours": lambda m: GaussianMixture(k, max_iter=m, dtype="float32", **kwargs).fit(x),
    }
    for fit in fits.values():
        fit(2)  # warm-up
    times: dict[str, list[float]] = {f"{name}_{m}": [] for name in fits for m in (1, passes)}
    for _ in range(spec["repeats"]):
        for m in (passes, 1):
            for name, fit in fits.items():
                time.sleep(SETTLE_SECONDS)  # the previous fit's BLAS threads go idle
                t = time.perf_counter()
                fit(m)
                times[f"{name}_{m}"].append(time.perf_counter() - t)
    sk = SkGaussianMixture(k, max_iter=passes, **kwargs).fit(x)
    ours = GaussianMixture(k, max_iter=passes, dtype="float32", **kwargs).fit(x)
    gemm, flops = gemm_seconds(n, d, k, cov, default_chunk_rows(cov, k, d))
    return {
        "times": times,
        "gemm": gemm,
        "flops": flops,
        "dll": float(ours.score(x)) - float(sk.score(x)),
    }


def whole(threads: int, repeats: int, only: str | None, rows: list[int]) -> None:
    """The whole-fit table at every number of `rows`: medians and interquartile ranges of
    alternated runs."""
    for n in rows:
        _whole_table(threads, repeats, only, n)


def _whole_table(threads: int, repeats: int, only: str | None, n: int) -> None:
    d, k, passes = 32, 16, 20
    print(
        f"\nwhole fits, initialization included: (N, D, K) = ({n:,}, {d}, {k}), float64 input, "
        f"means_init (so both run their k-means start on every row, the default), tol=0, "
        f"{passes} passes; scikit-learn float64 against ours float32; "
        f"median [interquartile range] of {repeats} alternated runs in one process, each after "
        f"an untimed {SETTLE_SECONDS} s pause (numpy's OpenBLAS threads spin for a while after "
        "a call and would take a core from the fit that follows)"
    )
    header = (
        f"{'cov':<5} {'sklearn fit s':>21} {'ours fit s':>21} {'fit ratio':>9} "
        f"{'sklearn pass ms':>15} {'ours pass ms':>12} {'pass ratio':>10} {'ours init s':>11} "
        f"{'GEMM ms':>7} {'roofline':>8} {'dLL/sample':>10}"
    )
    print(header)
    print("-" * len(header))
    for cov in ("diag", "full"):
        if only and cov != only:
            continue
        spec = {"n": n, "d": d, "k": k, "covariance_type": cov, "iters": passes}
        r = spawn(__file__, {**spec, "threads": threads, "repeats": repeats, "library": "whole"})
        if "error" in r:
            print(f"{cov:<5} error: {r['error']}")
            continue
        t = r["times"]
        sk_fit, ours_fit = quartiles(t[f"sklearn_{passes}"]), quartiles(t[f"ours_{passes}"])
        sk_pass = (sk_fit[0] - quartiles(t["sklearn_1"])[0]) / (passes - 1)
        ours_init = quartiles(t["ours_1"])[0]
        ours_pass = (ours_fit[0] - ours_init) / (passes - 1)
        print(
            f"{cov:<5} {sk_fit[0]:>6.3f} [{sk_fit[1]:.3f}-{sk_fit[2]:.3f}] "
            f"{ours_fit[0]:>6.3f} [{ours_fit[1]:.3f}-{ours_fit[2]:.3f}] "
            f"{sk_fit[0] / ours_fit[0]:>8.1f}x {1e3 * sk_pass:>15.1f} {1e3 * ours_pass:>12.1f} "
            f"{sk_pass / ours_pass:>9.1f}x {ours_init:>11.3f} {1e3 * r['gemm']:>7.1f} "
            f"{100 * r['gemm'] / ours_pass:>7.0f}% {r['dll']:>10.1e}"
        )
    print(
        "fit ratio = scikit-learn's median whole fit / ours; pass = (median "
        f"{passes}-pass fit - median 1-pass fit) / {passes - 1}; ours init = our median 1-pass "
        "fit; roofline = our pass's GEMMs alone (float32, same chunks) / our pass; dLL = our "
        "final mean log-likelihood - scikit-learn's"
    )


def main() -> None:
    parser = script_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="alternated runs per table")
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000], help="N of each table")
    args = parser.parse_args()
    if ran_as_child(args, whole_one):
        return
    whole(args.threads, args.repeats, args.only, args.rows)


if __name__ == "__main__":
    main()

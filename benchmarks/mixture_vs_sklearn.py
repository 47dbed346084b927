"""GaussianMixture (em) against scikit-learn: same data, same start, same number of passes.

Ours runs in float64 and float32 with ``batch_size=None`` (whole-data EM, streamed internally in
cache-sized chunks) and in float32 with explicit 32,768-row chunks. Each library is timed on the
data as it takes them: scikit-learn and our float64 rows on the float64 array, our float32 rows
on a float32 copy made before the timer starts. Every fit starts from the same explicit
parameters (``weights_init``, ``means_init``, ``precisions_init``), so no k-means start is
timed here; ``mixture_whole_fit.py`` times whole fits with their k-means start.

Every configuration runs in its own subprocess, so its peak RSS is its own. Printed per row: fit
time, the ratio scikit-learn time / our time (measured in the same run, after a 2-pass warm-up
fit on 2,000 rows for every library), the difference of the final mean log-likelihood per
sample, and the peak RSS above the loaded data. pomegranate is added side by side when it is
installed. Then the whole-fit table of ``mixture_whole_fit.py`` at 100,000 rows, and a last
row that streams N = 10M, D = 16, K = 64 (diag, float32) from a re-iterable generator of
batches, so that the data never sit in memory.

    python benchmarks/mixture_vs_sklearn.py            # the full sizes (several minutes)
    python benchmarks/mixture_vs_sklearn.py --quick    # a small smoke version
    python benchmarks/mixture_vs_sklearn.py --whole    # only the whole-fit table
    python benchmarks/mixture_vs_sklearn.py --roofline # what limits float32 speed here

``--whole`` and ``--roofline`` run ``mixture_whole_fit.py`` and ``mixture_roofline.py`` (see
their docstrings). The machine line comes first (CPU, instruction set, BLAS of numpy and
torch, threads).
"""

from __future__ import annotations

import importlib.util
import time
import warnings

import mixture_roofline
import mixture_whole_fit
import numpy as np
from mixture_common import (
    blob_data,
    common_start,
    peak_mb,
    ran_as_child,
    rss_mb,
    script_parser,
    spawn,
)


class BlobStream:
    """A re-iterable stream of blob batches, regenerated identically on every pass."""

    def __init__(self, n: int, d: int, k: int, batch: int, seed: int) -> None:
        self.n, self.d, self.batch, self.seed = n, d, batch, seed
        self.centers = np.random.default_rng(seed).uniform(-10, 10, (k, d)).astype(np.float32)

    def __iter__(self):
        for i, start in enumerate(range(0, self.n, self.batch)):
            rng = np.random.default_rng((self.seed, i))
            rows = min(self.batch, self.n - start)
            labels = rng.integers(0, len(self.centers), rows)
            noise = rng.standard_normal((rows, self.d), dtype=np.float32)
            yield self.centers[labels] + 2.0 * noise


def run_one(spec: dict) -> dict:
    """Fit one configuration in this process and report time, log-likelihood and memory."""
    import torch

    torch.set_num_threads(spec["threads"])
    warnings.simplefilter("ignore")
    n, d, k, cov = spec["n"], spec["d"], spec["k"], spec["covariance_type"]
    if spec["library"] == "stream":
        from implicit_em.mixture import GaussianMixture

        stream = BlobStream(n, d, k, spec["batch_size"], seed=0)
        first = next(iter(stream))
        base = rss_mb()
        gm = GaussianMixture(
            k,
            covariance_type=cov,
            max_iter=spec["iters"],
            tol=0.0,
            dtype="float32",
            **common_start(first, k, cov, seed=0),
        )
        t = time.perf_counter()
        gm.fit(stream)
        seconds = time.perf_counter() - t
        return {
            "seconds": seconds,
            "log_likelihood": gm.lower_bound_,
            "peak_mb": peak_mb(),
            "peak_above_data_mb": peak_mb() - base,
        }
    x = blob_data(n, d, k, seed=0)
    start = common_start(x, k, cov, seed=1)
    base = rss_mb()
    kwargs = {"covariance_type": cov, "max_iter": spec["iters"], "tol": 0.0, **start}
    if spec["library"] != "pomegranate":
        _warm_up(x[:2000], k, spec, {**kwargs, "max_iter": 2})
    xs = x if spec["dtype"] == "float64" else x.astype(np.float32)  # the data as given
    t = time.perf_counter()
    if spec["library"] == "sklearn":
        from sklearn.mixture import GaussianMixture as SkGaussianMixture

        gm = SkGaussianMixture(k, **kwargs).fit(x)
        seconds = time.perf_counter() - t
        ll = gm.score(x)
    elif spec["library"] == "pomegranate":
        seconds, ll = _pomegranate(x, start, spec)
    else:
        from implicit_em.mixture import GaussianMixture

        gm = GaussianMixture(k, dtype=spec["dtype"], batch_size=spec["batch_size"], **kwargs)
        gm.fit(xs)
        seconds = time.perf_counter() - t
        ll = gm.score(xs)
    return {
        "seconds": seconds,
        "log_likelihood": ll,
        "peak_mb": peak_mb(),
        "peak_above_data_mb": peak_mb() - base,
    }


def _warm_up(x: np.ndarray, k: int, spec: dict, kwargs: dict) -> None:
    """A 2-pass fit on 2,000 rows first, so one-off library start-up is not timed."""
    if spec["library"] == "sklearn":
        from sklearn.mixture import GaussianMixture as SkGaussianMixture

        SkGaussianMixture(k, **kwargs).fit(x)
    else:
        from implicit_em.mixture import GaussianMixture

        GaussianMixture(k, dtype=spec["dtype"], **kwargs).fit(x)


def _pomegranate(x: np.ndarray, start: dict, spec: dict) -> tuple[float, float]:
    """pomegranate v1 from the same start (means, covariances, priors), float32 as it is."""
    import torch
    from pomegranate.distributions import Normal
    from pomegranate.gmm import GeneralMixtureModel

    cov = spec["covariance_type"]
    precisions = np.asarray(start["precisions_init"])
    covs = 1.0 / precisions if cov == "diag" else np.linalg.inv(precisions)
    dists = [
        Normal(
            means=torch.as_tensor(m, dtype=torch.float32),
            covs=torch.as_tensor(c, dtype=torch.float32),
            covariance_type=cov,
        )
        for m, c in zip(start["means_init"], covs, strict=True)
    ]
    priors = torch.as_tensor(start["weights_init"], dtype=torch.float32)
    gm = GeneralMixtureModel(dists, priors=priors, max_iter=spec["iters"], tol=0.0)
    xt = torch.as_tensor(x, dtype=torch.float32)
    warm = GeneralMixtureModel(
        [Normal(covariance_type=cov) for _ in dists], max_iter=2, tol=0.0, init="first-k"
    )
    warm.fit(xt[:2000])
    t = time.perf_counter()
    gm.fit(xt)
    return time.perf_counter() - t, float(gm.log_probability(xt).double().mean())


def main() -> None:
    parser = script_parser(__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument(
        "--roofline", action="store_true", help="measure what limits float32 speed (see above)"
    )
    parser.add_argument("--whole", action="store_true", help="only the whole-fit table (see above)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="alternated runs of the whole-fit table"
    )
    args = parser.parse_args()
    if ran_as_child(args, run_one):
        return
    if args.quick:
        sizes = [(20_000, 8, 4, "diag", 10), (20_000, 8, 4, "full", 10)]
        stream = (200_000, 16, 8, 10_000, 2)
    else:
        sizes = [
            (200_000, 32, 16, "diag", 10),
            (200_000, 32, 16, "full", 10),
            (1_000_000, 64, 64, "diag", 5),
        ]
        stream = (10_000_000, 16, 64, 65_536, 2)
    print("(figures are this machine's; ratios are measured in the same run)")
    if args.roofline:
        roof_sizes = mixture_roofline.QUICK_SIZES if args.quick else mixture_roofline.SIZES
        roof_sizes = [s for s in roof_sizes if not args.only or s[3] == args.only]
        mixture_roofline.roofline(roof_sizes, args.threads)
        return
    if args.whole:
        mixture_whole_fit.whole(args.threads, args.repeats, args.only, [100_000])
        return
    ours = [("float64", None), ("float32", None), ("float32", 32_768)]
    libraries = ["sklearn"] + (["pomegranate"] if importlib.util.find_spec("pomegranate") else [])
    header = (
        f"{'N':>9} {'D':>3} {'K':>3} {'cov':<5} {'fitter':<26} {'seconds':>8} "
        f"{'sklearn/x':>9} {'dLL/sample':>11} {'peak RSS MB':>11} {'above data':>10}"
    )
    print(f"threads per library: {args.threads}")
    print(header)
    print("-" * len(header))
    for n, d, k, cov, iters in sizes:
        if args.only and cov != args.only:
            continue
        base = {
            "n": n,
            "d": d,
            "k": k,
            "covariance_type": cov,
            "iters": iters,
            "threads": args.threads,
            "dtype": "float64",
            "batch_size": None,
        }
        reference = spawn(__file__, {**base, "library": "sklearn"})
        rows = [("sklearn (float64)", reference)]
        rows += [
            (f"pomegranate ({lib})", spawn(__file__, {**base, "library": lib}))
            for lib in libraries[1:]
        ]
        for dtype, batch in ours:
            label = f"implicit-em em {dtype} b={batch or 'None'}"
            rows.append(
                (
                    label,
                    spawn(
                        __file__, {**base, "library": "ours", "dtype": dtype, "batch_size": batch}
                    ),
                )
            )
        for label, r in rows:
            if "error" in r:
                print(f"{n:>9} {d:>3} {k:>3} {cov:<5} {label:<26} error: {r['error']}")
                continue
            ratio = reference["seconds"] / r["seconds"]
            dll = r["log_likelihood"] - reference["log_likelihood"]
            print(
                f"{n:>9} {d:>3} {k:>3} {cov:<5} {label:<26} {r['seconds']:>8.2f} "
                f"{ratio:>8.2f}x {dll:>11.2e} {r['peak_mb']:>11.0f} "
                f"{r['peak_above_data_mb']:>10.0f}"
            )
    mixture_whole_fit.whole(args.threads, args.repeats, args.only, [100_000])
    if args.only:
        return
    n, d, k, batch, iters = stream
    r = spawn(
        __file__,
        {
            "n": n,
            "d": d,
            "k": k,
            "covariance_type": "diag",
            "iters": iters,
            "threads": args.threads,
            "batch_size": batch,
            "library": "stream",
        },
    )
    print(f"\nstreaming N={n:,} D={d} K={k} diag float32, batches of {batch:,}, {iters} passes:")
    if "error" in r:
        print(f"  error: {r['error']}")
    else:
        print(
            f"  {r['seconds']:.1f} s ({r['seconds'] / iters:.1f} s per pass), "
            f"mean log-likelihood {r['log_likelihood']:.4f}, peak RSS {r['peak_mb']:.0f} MB "
            f"({'under' if r['peak_mb'] < 1536 else 'OVER'} the 1.5 GB target)"
        )


if __name__ == "__main__":
    main()

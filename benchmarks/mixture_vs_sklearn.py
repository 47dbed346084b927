"""GaussianMixture (em) against scikit-learn: same data, same start, same number of passes.

Ours runs in float64 and float32 with ``batch_size=None`` (whole-data EM, streamed internally in
cache-sized chunks) and in float32 with explicit 32,768-row chunks. Each library is timed on the
data as it takes them: scikit-learn and our float64 rows on the float64 array, our float32 rows
on a float32 copy made before the timer starts.

Every configuration runs in its own subprocess, so its peak RSS is its own. Printed per row: fit
time, the ratio scikit-learn time / our time (measured in the same run, after a 2-pass warm-up fit on 2,000 rows for every library), the difference of the
final mean log-likelihood per sample, and the peak RSS above the loaded data. pomegranate is
added side by side when it is installed. A last row streams N = 10M, D = 16, K = 64 (diag,
float32) from a re-iterable generator of batches, so that the data never sit in memory.

    python benchmarks/mixture_vs_sklearn.py            # the issue's sizes (several minutes)
    python benchmarks/mixture_vs_sklearn.py --quick    # a small smoke version
    python benchmarks/mixture_vs_sklearn.py --roofline # what limits float32 speed here

``--roofline`` measures, in one process per size: the machine's float32 and float64 matmul
throughput (a 2,048-square matmul) and its copy bandwidth (a 256 MiB copy); the time of one of
our float32 passes (``n``-pass fits against 1-pass fits, alternated, medians; ``n`` chosen
for about 1.5 s of passes, and the interquartile range of the ``n``-pass fits, per pass,
printed as ±) against the time of
its GEMMs alone (the E-step's and the M-step's products on the same chunk shapes); and
scikit-learn's float64 pass. The last two columns are ceilings of the method on the machine:
the ratio scikit-learn's pass would show against our pass if it ran nothing but its GEMMs,
at the rate these GEMM shapes reach here ("GEMM ceiling") and at the square-matmul peak
("peak ceiling").
``--whole`` prints only the whole-fit table (also printed after the main rows): whole fits,
initialization included, at (100k, 32, 16) for diag and full, float64 input with ``means_init``
alone (both libraries then run their k-means initialization), ``tol=0``, 20 passes,
scikit-learn in float64 against ours with ``dtype="float32"``: 20-pass and 1-pass fits of each
library alternated ``--repeats`` times (default 5) in one process, each timed fit after an
untimed pause of ``SETTLE_SECONDS`` (numpy's OpenBLAS threads keep spinning for a while after
scikit-learn's last BLAS call and take a core from the fit that follows: measured on a 2-core
Xeon, our 1-pass fit took 0.10 s right after a scikit-learn fit and 0.065 s after a 0.3 s
pause; scikit-learn's after ours, 0.22 and 0.21 s), printed as medians with their
interquartile ranges; the pass-against-pass ratio ((20-pass - 1-pass) / 19, medians);
our initialization (the 1-pass fit); and the roofline fraction, the time of our pass's GEMMs
alone (float32, the same chunks) over our pass.

The machine line comes first (CPU, instruction set, BLAS of numpy and torch, threads).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _start(x: np.ndarray, k: int, covariance_type: str, seed: int) -> dict:
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


def _data(n: int, d: int, k: int, seed: int) -> np.ndarray:
    from sklearn.datasets import make_blobs

    x, _ = make_blobs(n_samples=n, n_features=d, centers=k, cluster_std=2.0, random_state=seed)
    return x


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
        base = _rss_mb()
        gm = GaussianMixture(
            k,
            covariance_type=cov,
            max_iter=spec["iters"],
            tol=0.0,
            dtype="float32",
            **_start(first, k, cov, seed=0),
        )
        t = time.perf_counter()
        gm.fit(stream)
        seconds = time.perf_counter() - t
        return {
            "seconds": seconds,
            "log_likelihood": gm.lower_bound_,
            "peak_mb": _peak_mb(),
            "peak_above_data_mb": _peak_mb() - base,
        }
    x = _data(n, d, k, seed=0)
    start = _start(x, k, cov, seed=1)
    base = _rss_mb()
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
        "peak_mb": _peak_mb(),
        "peak_above_data_mb": _peak_mb() - base,
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


def _pass_seconds(fit, target: float = 1.5, repeats: int = 5) -> tuple[float, float]:
    """Seconds of one pass, and its spread: ``n``-pass fits against 1-pass fits.

    After a warm-up, ``n`` is chosen so that an ``n``-pass fit spends about ``target`` seconds
    in its passes (3 to 41 passes); then ``repeats`` 1-pass and ``n``-pass fits alternate. The
    pass is (median of the ``n``-pass fits - median of the 1-pass fits) / (n - 1), and the
    spread is the interquartile range of the ``n``-pass fits over (n - 1): the difference of
    two single fits is noise where a fit's setup is long against its passes.
    """

    def timed(passes: int) -> float:
        t = time.perf_counter()
        fit(passes)
        return time.perf_counter() - t

    timed(1)  # warm-up
    rough = max(timed(3) - timed(1), 1e-6) / 2
    n = int(min(max(1 + target / rough, 3), 41))
    ones, many = [], []
    for _ in range(repeats):
        ones.append(timed(1))
        many.append(timed(n))
    low, high = np.percentile(many, [25, 75])
    pass_seconds = max(float(np.median(many) - np.median(ones)), 1e-9) / (n - 1)
    return pass_seconds, float(high - low) / (n - 1)


def _best_seconds(work, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - t)
    return best


def machine_peaks() -> dict:
    """Measured matmul GFLOP/s (float32, float64) and copy GB/s (read + write) of this machine."""
    import torch

    peaks = {}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        a = torch.randn(2048, 2048, dtype=dtype)
        peaks[f"gflops_{name}"] = 2 * 2048**3 / _best_seconds(lambda a=a: a @ a) / 1e9
    src = torch.empty(2**26, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    peaks["copy_gbs"] = 2 * src.numel() * 4 / _best_seconds(lambda: dst.copy_(src)) / 1e9
    return peaks


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

    return _best_seconds(one_pass), flops


def roofline_one(spec: dict) -> dict:
    """Peaks, our float32 pass, its GEMMs alone, and scikit-learn's float64 pass for one size."""
    import torch
    from sklearn.mixture import GaussianMixture as SkGaussianMixture

    from implicit_em.mixture import GaussianMixture
    from implicit_em.mixture.fitting import default_chunk_rows

    torch.set_num_threads(spec["threads"])
    warnings.simplefilter("ignore")
    n, d, k, cov = spec["n"], spec["d"], spec["k"], spec["covariance_type"]
    x = _data(n, d, k, seed=0)
    x32 = x.astype(np.float32)
    start = _start(x, k, cov, seed=1)
    kwargs = {"covariance_type": cov, "tol": 0.0, **start}
    ours, ours_spread = _pass_seconds(lambda m: GaussianMixture(k, max_iter=m, **kwargs).fit(x32))
    sk, sk_spread = _pass_seconds(
        lambda m: SkGaussianMixture(k, max_iter=m, **kwargs).fit(x), repeats=3
    )
    rows = default_chunk_rows(cov, k, d)
    gemm, flops = gemm_seconds(n, d, k, cov, rows)
    return {
        **machine_peaks(),
        "ours": ours,
        "ours_spread": ours_spread,
        "sklearn": sk,
        "sklearn_spread": sk_spread,
        "gemm": gemm,
        "flops": flops,
    }


SETTLE_SECONDS = 0.5
"""Untimed pause before each timed fit of the whole-fit table (see the module docstring)."""


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    low, median, high = np.percentile(values, [25, 50, 75])
    return float(median), float(low), float(high)


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
    x = _data(n, d, k, seed=0)
    means = _start(x, k, cov, seed=1)["means_init"]
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


def whole(threads: int, repeats: int, only: str | None) -> None:
    """The whole-fit table: medians and interquartile ranges of alternated runs."""
    n, d, k, passes = 100_000, 32, 16, 20
    print(
        f"\nwhole fits, initialization included: (N, D, K) = ({n:,}, {d}, {k}), float64 input, "
        f"means_init, tol=0, {passes} passes; scikit-learn float64 against ours float32; "
        f"median [interquartile range] of {repeats} alternated runs in one process, each after an untimed {SETTLE_SECONDS} s pause"
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
        r = _spawn({**spec, "threads": threads, "repeats": repeats, "library": "whole"})
        if "error" in r:
            print(f"{cov:<5} error: {r['error']}")
            continue
        t = r["times"]
        sk_fit, ours_fit = _quartiles(t[f"sklearn_{passes}"]), _quartiles(t[f"ours_{passes}"])
        sk_pass = (sk_fit[0] - _quartiles(t["sklearn_1"])[0]) / (passes - 1)
        ours_init = _quartiles(t["ours_1"])[0]
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


def roofline(sizes: list[tuple], threads: int) -> None:
    header = (
        f"{'N':>9} {'D':>3} {'K':>3} {'cov':<5} {'sklearn s':>15} {'ours s':>15} {'ratio':>6} "
        f"{'GEMM s':>7} {'GEMM %':>6} {'GEMM GF/s':>9} {'pass GF/s':>9} {'f32 peak':>8} "
        f"{'copy GB/s':>9} {'GEMM ceiling':>12} {'peak ceiling':>12}"
    )
    print("one EM pass, float32 (ours) against float64 (scikit-learn); GF/s = GEMM FLOPs / s")
    print(header)
    print("-" * len(header))
    for n, d, k, cov, _ in sizes:
        spec = {"n": n, "d": d, "k": k, "covariance_type": cov, "threads": threads}
        r = _spawn({**spec, "library": "roofline"})
        if "error" in r:
            print(f"{n:>9} {d:>3} {k:>3} {cov:<5} error: {r['error']}")
            continue
        peak = r["gflops_float32"]
        ceiling = r["sklearn"] / (r["flops"] / (peak * 1e9))
        print(
            f"{n:>9} {d:>3} {k:>3} {cov:<5} {r['sklearn']:>7.3f} ±{r['sklearn_spread']:<6.3f} "
            f"{r['ours']:>7.3f} ±{r['ours_spread']:<6.3f} "
            f"{r['sklearn'] / r['ours']:>5.1f}x {r['gemm']:>7.3f} "
            f"{100 * r['gemm'] / r['ours']:>5.0f}% {r['flops'] / r['gemm'] / 1e9:>9.1f} "
            f"{r['flops'] / r['ours'] / 1e9:>9.1f} {peak:>8.1f} {r['copy_gbs']:>9.1f} "
            f"{r['sklearn'] / r['gemm']:>11.1f}x {ceiling:>11.1f}x"
        )
    print(
        "± = interquartile range of the many-pass fits, per pass; "
        "GEMM % = share of our pass spent in its GEMMs; GEMM ceiling = scikit-learn's pass / our "
        "GEMMs alone; peak ceiling = scikit-learn's pass / our GEMM FLOPs at the float32 peak"
    )


def _spawn(spec: dict) -> dict:
    threads = str(spec["threads"])
    env = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--threads", type=int, default=2, help="threads for every library (BLAS and torch)"
    )
    parser.add_argument(
        "--only", choices=["diag", "full"], help="run only this covariance type (no streaming row)"
    )
    parser.add_argument(
        "--roofline", action="store_true", help="measure what limits float32 speed (see above)"
    )
    parser.add_argument("--whole", action="store_true", help="only the whole-fit table (see above)")
    parser.add_argument(
        "--repeats", type=int, default=5, help="alternated runs of the whole-fit table"
    )
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        child = {"roofline": roofline_one, "whole": whole_one}.get(spec["library"], run_one)
        print(json.dumps(child(spec)))
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
    import torch

    from implicit_em.machine import summary

    torch.set_num_threads(args.threads)  # what every child runs with, so the header says so
    print(f"machine: {summary()}")
    print("(figures are this machine's; ratios are measured in the same run)")
    if args.roofline:
        roofline([s for s in sizes if not args.only or s[3] == args.only], args.threads)
        return
    if args.whole:
        whole(args.threads, args.repeats, args.only)
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
        reference = _spawn({**base, "library": "sklearn"})
        rows = [("sklearn (float64)", reference)]
        rows += [
            (f"pomegranate ({lib})", _spawn({**base, "library": lib})) for lib in libraries[1:]
        ]
        for dtype, batch in ours:
            label = f"implicit-em em {dtype} b={batch or 'None'}"
            rows.append(
                (label, _spawn({**base, "library": "ours", "dtype": dtype, "batch_size": batch}))
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
    whole(args.threads, args.repeats, args.only)
    if args.only:
        return
    n, d, k, batch, iters = stream
    r = _spawn(
        {
            "n": n,
            "d": d,
            "k": k,
            "covariance_type": "diag",
            "iters": iters,
            "threads": args.threads,
            "batch_size": batch,
            "library": "stream",
        }
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

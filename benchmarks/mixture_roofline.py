"""What limits our float32 EM pass: its GEMMs alone against the whole pass, per size.

In one process per size: the machine's float32 and float64 matmul throughput (a 2,048-square
matmul) and its copy bandwidth (a 256 MiB copy); the time of one of our float32 passes
(``n``-pass fits against 1-pass fits, alternated, medians; ``n`` chosen for about 1.5 s of
passes, and the interquartile range of the ``n``-pass fits, per pass, printed as ±) against
the time of its GEMMs alone (the E-step's and the M-step's products on the same chunk
shapes); and scikit-learn's float64 pass, both from the same explicit start (no k-means). The
last two columns are ceilings of the method on the machine: the ratio scikit-learn's pass
would show against our pass if it ran nothing but its GEMMs, at the rate these GEMM shapes
reach here ("GEMM ceiling") and at the square-matmul peak ("peak ceiling").

``--kmeans`` prints the k-means start against its GEMMs instead, at (100k, 32, 16) and (1M,
32, 16) float64 (see `kmeans_roofline_one`).

    python benchmarks/mixture_roofline.py [--quick] [--only diag|full] [--threads T]
    python benchmarks/mixture_roofline.py --kmeans [--quick] [--repeats R] [--threads T]
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
from mixture_common import (
    best_seconds,
    blob_data,
    common_start,
    gemm_seconds,
    quartiles,
    ran_as_child,
    script_parser,
    spawn,
)

SIZES = [(200_000, 32, 16, "diag"), (200_000, 32, 16, "full"), (1_000_000, 64, 64, "diag")]
QUICK_SIZES = [(20_000, 8, 4, "diag"), (20_000, 8, 4, "full")]
KMEANS_SIZES = [(100_000, 32, 16), (1_000_000, 32, 16)]
QUICK_KMEANS_SIZES = [(20_000, 8, 4)]


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


def machine_peaks() -> dict:
    """Measured matmul GFLOP/s (float32, float64) and copy GB/s (read + write) of this machine."""
    import torch

    peaks = {}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        a = torch.randn(2048, 2048, dtype=dtype)
        peaks[f"gflops_{name}"] = 2 * 2048**3 / best_seconds(lambda a=a: a @ a) / 1e9
    src = torch.empty(2**26, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    peaks["copy_gbs"] = 2 * src.numel() * 4 / best_seconds(lambda: dst.copy_(src)) / 1e9
    return peaks


def roofline_one(spec: dict) -> dict:
    """Peaks, our float32 pass, its GEMMs alone, and scikit-learn's float64 pass for one size."""
    import torch
    from sklearn.mixture import GaussianMixture as SkGaussianMixture

    from implicit_em.mixture import GaussianMixture
    from implicit_em.mixture.fitting import default_chunk_rows

    torch.set_num_threads(spec["threads"])
    warnings.simplefilter("ignore")
    n, d, k, cov = spec["n"], spec["d"], spec["k"], spec["covariance_type"]
    x = blob_data(n, d, k, seed=0)
    x32 = x.astype(np.float32)
    start = common_start(x, k, cov, seed=1)
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


def roofline(sizes: list[tuple], threads: int) -> None:
    header = (
        f"{'N':>9} {'D':>3} {'K':>3} {'cov':<5} {'sklearn s':>15} {'ours s':>15} {'ratio':>6} "
        f"{'GEMM s':>7} {'GEMM %':>6} {'GEMM GF/s':>9} {'pass GF/s':>9} {'f32 peak':>8} "
        f"{'copy GB/s':>9} {'GEMM ceiling':>12} {'peak ceiling':>12}"
    )
    print("one EM pass, float32 (ours) against float64 (scikit-learn); GF/s = GEMM FLOPs / s")
    print(header)
    print("-" * len(header))
    for n, d, k, cov in sizes:
        spec = {"n": n, "d": d, "k": k, "covariance_type": cov, "threads": threads}
        r = spawn(__file__, {**spec, "library": "roofline"})
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


def kmeans_roofline_one(spec: dict) -> dict:
    """The k-means start's pieces against their GEMMs, float64, alternated ``repeats`` times.

    Timed, each on the same centered transposed copy the start builds: the GEMM
    ``X @ C.T`` (``[N, D] @ [D, K]``, the reference); k-means++ seeding (``seed_indices``)
    and its GEMMs alone (one ``[1, D+2] @ [D+2, N]`` product, then ``K - 1`` of
    ``[2 + log K, D+2] @ [D+2, N]``); a Lloyd step with every label changed (the nearest
    centers, the label sums over every row, the new centers) and with none changed (the
    settled step); our whole k-means (``kmeans_labels``, copy included) and scikit-learn's
    ``KMeans(n_init=1)`` on the same data and seed.
    """
    import torch
    from sklearn.cluster import KMeans

    from implicit_em.mixture.kmeans import (
        LabelSums,
        assign,
        kmeans_labels,
        seed_indices,
        transposed_lifted,
        updated_centers,
    )

    torch.set_num_threads(spec["threads"])
    n, d, k = spec["n"], spec["d"], spec["k"]
    x = blob_data(n, d, k, seed=0)
    xt = torch.as_tensor(x)
    shift = xt.mean(dim=0, dtype=torch.float64)
    lifted = transposed_lifted(xt, shift)
    augmented = lifted[:-1]
    indices = seed_indices(lifted, k, np.random.RandomState(0))
    centers = augmented[:-1, torch.as_tensor(indices)].T.contiguous()
    distances = augmented.new_empty(k, n)
    trials = 2 + int(np.log(k))
    operands = [torch.randn(1, d + 2, dtype=torch.float64)] + [
        torch.randn(trials, d + 2, dtype=torch.float64) for _ in range(k - 1)
    ]
    candidates = augmented.new_empty(trials, n)
    settled = LabelSums(augmented, xt, shift, k)
    settled.update(assign(augmented, centers, distances))

    def lloyd_step(sums: LabelSums) -> None:
        labels = assign(augmented, centers, distances)
        updated_centers(augmented, *sums.update(labels), labels, centers)

    pieces = {
        "gemm": lambda: torch.mm(xt, centers.T),
        "seeding": lambda: seed_indices(lifted, k, np.random.RandomState(0)),
        "seeding_gemms": lambda: [
            torch.mm(w, lifted, out=candidates[: w.shape[0]]) for w in operands
        ],
        "step": lambda: lloyd_step(LabelSums(augmented, xt, shift, k)),
        "settled_step": lambda: lloyd_step(settled),
        "ours": lambda: kmeans_labels(x, k, np.random.RandomState(0)),
        "sklearn": lambda: KMeans(k, n_init=1, random_state=np.random.RandomState(0)).fit(x),
    }
    times: dict[str, list[float]] = {name: [] for name in pieces}
    for work in pieces.values():
        work()  # warm-up
    for _ in range(spec["repeats"]):
        for name, work in pieces.items():
            t = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - t)
    reference = KMeans(k, n_init=1, random_state=np.random.RandomState(0)).fit(x)
    same = kmeans_labels(x, k, np.random.RandomState(0)) == reference.labels_
    return {"times": times, "lloyd_steps": int(reference.n_iter_), "same": float(same.mean())}


def _ms(median_low_high: tuple[float, float, float]) -> str:
    median, low, high = (1e3 * v for v in median_low_high)
    return f"{median:.1f} [{low:.1f}-{high:.1f}]"


def kmeans_roofline(sizes: list[tuple], threads: int, repeats: int) -> None:
    print(
        f"the k-means start (k-means++ seeding and Lloyd steps) against its GEMMs, float64; "
        f"median [interquartile range] of {repeats} alternated runs, in ms"
    )
    header = (
        f"{'N':>9} {'D':>3} {'K':>3} {'GEMM X@C.T':>17} {'k-means++':>19} {'its GEMMs':>9} "
        f"{'/its':>5} {'/GEMM':>6} {'Lloyd step':>17} {'/GEMM':>6} {'settled':>17} "
        f"{'/GEMM':>6} {'ours k-means':>13} {'sklearn KMeans':>14} {'steps':>5} {'labels':>6}"
    )
    print(header)
    print("-" * len(header))
    for n, d, k in sizes:
        spec = {"n": n, "d": d, "k": k, "threads": threads, "repeats": repeats}
        r = spawn(__file__, {**spec, "library": "kmeans"})
        if "error" in r:
            print(f"{n:>9} {d:>3} {k:>3} error: {r['error']}")
            continue
        q = {name: quartiles(values) for name, values in r["times"].items()}
        gemm = q["gemm"][0]
        print(
            f"{n:>9} {d:>3} {k:>3} {_ms(q['gemm']):>17} {_ms(q['seeding']):>19} "
            f"{1e3 * q['seeding_gemms'][0]:>9.1f} "
            f"{q['seeding'][0] / q['seeding_gemms'][0]:>4.1f}x "
            f"{q['seeding'][0] / gemm:>5.1f}x {_ms(q['step']):>17} "
            f"{q['step'][0] / gemm:>5.1f}x "
            f"{_ms(q['settled_step']):>17} {q['settled_step'][0] / gemm:>5.1f}x "
            f"{1e3 * q['ours'][0]:>13.1f} {1e3 * q['sklearn'][0]:>14.1f} "
            f"{r['lloyd_steps']:>5} {100 * r['same']:>5.1f}%"
        )
    print(
        "GEMM X@C.T = [N, D] @ [D, K]; its GEMMs = the seeding's products alone (one for the "
        "first seed, then K - 1 of 2 + log K candidates: each a pass over the data); Lloyd "
        "step = nearest centers, label sums over every row, new centers; settled = the same "
        "with no label changed; steps = scikit-learn's Lloyd steps (n_iter_); labels = share "
        "of our labels equal to scikit-learn's"
    )


def main() -> None:
    parser = script_parser(__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--kmeans", action="store_true", help="the k-means start instead")
    parser.add_argument("--repeats", type=int, default=7, help="alternated runs (--kmeans)")
    args = parser.parse_args()
    if args.child and json.loads(args.child).get("library") == "kmeans":
        ran_as_child(args, kmeans_roofline_one)
        return
    if ran_as_child(args, roofline_one):
        return
    if args.kmeans:
        sizes = QUICK_KMEANS_SIZES if args.quick else KMEANS_SIZES
        kmeans_roofline(sizes, args.threads, args.repeats)
        return
    sizes = QUICK_SIZES if args.quick else SIZES
    roofline([s for s in sizes if not args.only or s[3] == args.only], args.threads)


if __name__ == "__main__":
    main()

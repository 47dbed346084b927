"""Training-step overhead and memory of the tracer on a small transformer (CPU).

Overhead: one model and one loop, traced with ``every=1`` and then with ``every=10``. Inside
each ``with Tracer(...)`` block, short traced blocks alternate with untraced blocks of the same
length run under ``tracer.paused()`` (the same loop, nothing captured), in ABBA order. This
machine's speed drifts by several percent within a second, so blocks are short (one flush
window for ``every=1``: ``flush_every`` = 128 steps; one 10-step cycle for ``every=10``, a flush
every 128th) and many.
The overhead is (summed traced time) / (summed untraced time) - 1, which counts measured steps,
unmeasured steps and flushes in their true proportions, with its standard error over pairs;
the median of the per-pair ratios is printed beside it. The tracer's first two measurements
are full site discoveries (then it captures narrowly along the plan it found), a one-off cost
timed apart; periodic rediscovery (every ``rediscover`` = 100 measurements) falls inside.
Memory: peak RSS of fresh processes tracing 100 and 1000 steps (JSONL sink, and the in-memory
history). Targets: <= 5% (every=1), <= 1% (every=10); memory independent of the number of steps.

The allocator: glibc trims the heap when a large block at its top is freed, and this loop then
page-faults hundreds of times per step as it grows the heap again, traced or not (the minor
faults per step of both arms are printed). How many it takes varies from one process to the
next by hundreds of microseconds per step, more than the tracer costs, so by default the
timing runs with trimming off (``mallopt(M_TRIM_THRESHOLD)``, ``M_MMAP_THRESHOLD``, as the
``MALLOC_TRIM_THRESHOLD_`` environment variable would); ``--malloc default`` leaves glibc as
it is.

    .venv/bin/python benchmarks/trace_overhead.py [--pairs 40] [--pairs-10 200] [--max-rows R]
        [--device cuda]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import Tracer

SEQ, BATCH, WIDTH, HEADS, LAYERS, CLASSES, VOCAB = 32, 32, 64, 4, 2, 10, 100


class SmallTransformer(nn.Module):
    """Token embedding, a 2-layer TransformerEncoder (SDPA inside nn.MultiheadAttention), head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)).mean(1))


def make(
    device: str = "cpu",
) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = SmallTransformer().to(device)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ)).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), ids, ids[:, 0] % CLASSES


def _sync(ids: torch.Tensor) -> None:
    """Wait for the device's queued work (timings on a GPU end when its work ends)."""
    if ids.is_cuda:
        torch.cuda.synchronize(ids.device)


def _step(model, opt, ids, y, tracer: Tracer | None) -> None:
    F.cross_entropy(model(ids), y).backward()
    opt.step()
    opt.zero_grad()
    if tracer is not None:
        tracer.step()


def block(model, opt, ids, y, steps: int, every: int | None, sinks=("memory",)) -> float:
    """Mean seconds per step of ``steps`` steps in a fresh tracer (untraced if ``every`` is None)."""
    _sync(ids)
    start = time.perf_counter()
    if every is None:
        for _ in range(steps):
            _step(model, opt, ids, y, None)
    else:
        with Tracer(model, every=every, sinks=list(sinks)) as tracer:
            for _ in range(steps):
                _step(model, opt, ids, y, tracer)
    _sync(ids)
    return (time.perf_counter() - start) / steps


def _timed(model, opt, ids, y, steps: int, tracer: Tracer | None) -> float:
    _sync(ids)
    start = time.perf_counter()
    for _ in range(steps):
        _step(model, opt, ids, y, tracer)
    _sync(ids)
    return time.perf_counter() - start


def overhead(
    model, opt, ids, y, every: int, pairs: int, tracer_kwargs: dict | None = None
) -> dict[str, float]:
    """Overhead of ``every`` over ``pairs`` ABBA pairs of traced / paused blocks: summed-time
    ratio with its standard error, median pair ratio, untraced and traced ms per step, and the
    one-off cost of the two discovery steps (ms beyond two untraced steps)."""
    with Tracer(model, every=every, **(tracer_kwargs or {})) as tracer:
        steps = tracer.flush_every if every == 1 else every
        discoveries = 0.0
        for i in range(2 * every):
            _sync(ids)
            start = time.perf_counter()
            _step(model, opt, ids, y, tracer)
            _sync(ids)
            if i % every == 0:
                discoveries += time.perf_counter() - start
        traced, plain = [], []
        faults = {True: 0, False: 0}
        for i in range(pairs):
            for is_traced in (True, False) if i % 2 == 0 else (False, True):
                before = _minor_faults()
                if is_traced:
                    traced.append(_timed(model, opt, ids, y, steps, tracer))
                else:
                    with tracer.paused():
                        plain.append(_timed(model, opt, ids, y, steps, None))
                faults[is_traced] += _minor_faults() - before
    diffs = [t - p for t, p in zip(traced, plain, strict=True)]
    step = sum(plain) / (pairs * steps)
    return {
        "summed_pct": 100 * sum(diffs) / sum(plain),
        "stderr_pct": 100 * statistics.stdev(diffs) * math.sqrt(pairs) / sum(plain),
        "median_pct": 100
        * (statistics.median([t / p for t, p in zip(traced, plain, strict=True)]) - 1),
        "plain_ms": 1e3 * step,
        "traced_ms": 1e3 * sum(traced) / (pairs * steps),
        "block_steps": steps,
        "faults_traced": faults[True] / (pairs * steps),
        "faults_plain": faults[False] / (pairs * steps),
        "discovery_ms": 1e3 * (discoveries - 2 * step),
    }


def _no_trim() -> None:
    """Keep freed memory in the heap instead of returning it to the system (glibc only)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(-1, 2**30)  # M_TRIM_THRESHOLD
    libc.mallopt(-3, 2**25)  # M_MMAP_THRESHOLD: fixed, so large blocks stay in the heap


def _minor_faults() -> int:
    """Minor page faults of this process so far (a heap trimmed and grown again faults on
    every page it touches anew; both arms are counted to tell that apart from the tracer)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _peak_rss_mib() -> float:
    """This process's peak resident memory (MiB): ``VmHWM`` of ``/proc/self/status`` where
    there is one. ``ru_maxrss`` of a child process can report its parent's size (Linux counts
    the memory map the child had before ``exec``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss(steps: int, sink: str | None) -> float:
    """Peak RSS (MiB) of a fresh process training ``steps`` steps, traced into ``sink``
    (``"memory"`` or ``"jsonl"``) or untraced (None)."""
    with tempfile.TemporaryDirectory() as tmp:
        sinks = ["memory"] if sink == "memory" else [f"jsonl:{Path(tmp) / 'run.jsonl'}"]
        every = None if sink is None else 1
        here = str(Path(__file__).parent)
        code = (
            f"import sys, torch; sys.path.insert(0, {here!r}); torch.set_num_threads(1)\n"
            "from trace_overhead import make, block, _peak_rss_mib\n"
            f"m, o, i, y = make(); block(m, o, i, y, {steps}, {every}, {sinks!r})\n"
            "print(_peak_rss_mib())"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40, help="block pairs for every=1")
    parser.add_argument("--pairs-10", type=int, default=200, help="block pairs for every=10")
    parser.add_argument(
        "--max-rows", type=int, default=None, help="attention rows traced (the tracer's default)"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-RSS runs")
    parser.add_argument(
        "--device", default="cpu", help="where the model trains (cuda: a GPU figure; no target)"
    )
    parser.add_argument(
        "--malloc",
        choices=("no-trim", "default"),
        default="no-trim",
        help="glibc heap trimming during the timing (see the module docstring)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.malloc == "no-trim":
        _no_trim()
    torch.set_num_threads(1)
    model, opt, ids, y = make(args.device)
    block(model, opt, ids, y, 30, None)
    kwargs = {} if args.max_rows is None else {"max_rows": args.max_rows}
    result = {
        "every=1": overhead(model, opt, ids, y, 1, args.pairs, kwargs),
        "every=10": overhead(model, opt, ids, y, 10, args.pairs_10, kwargs),
    }
    rss = (
        {}
        if args.no_memory or args.device != "cpu"
        else {
            f"{s} steps, {k or 'untraced'}": peak_rss(s, k)
            for k in (None, "jsonl", "memory")
            for s in (100, 1000)
        }
    )
    if args.json:
        print(json.dumps({**result, "peak_rss_mib": rss}, indent=2))
        return
    print(
        f"small transformer: {LAYERS} layers, width {WIDTH}, {HEADS} heads, seq {SEQ}, "
        f"batch {BATCH}; {args.device} (1 CPU thread); malloc {args.malloc}; max_rows {Tracer(model, **kwargs).capture.max_rows}; "
        "ABBA pairs of traced / paused blocks"
    )
    print(
        f"{'config':<9} {'pairs':>5} {'block':>5} {'untraced ms':>11} {'traced ms':>9} "
        f"{'overhead':>15} {'median':>7} {'target':>6} {'discovery ms':>12} {'faults/step':>13}"
    )
    for (k, r), pairs, target in zip(
        result.items(), (args.pairs, args.pairs_10), (5.0, 1.0), strict=True
    ):
        spread = f"{r['summed_pct']:.2f}% ± {r['stderr_pct']:.2f}"
        print(
            f"{k:<9} {pairs:>5} {r['block_steps']:>5} {r['plain_ms']:>11.2f} "
            f"{r['traced_ms']:>9.2f} {spread:>15} {r['median_pct']:>6.2f}% "
            f"{target:>5.0f}% {r['discovery_ms']:>12.1f} "
            f"{r['faults_traced']:>6.0f}/{r['faults_plain']:<6.0f}"
        )
    if rss:
        print("peak RSS (MiB, fresh process, every=1):")
    for k, v in rss.items():
        print(f"  {k:<22} {v:8.1f}")


if __name__ == "__main__":
    main()

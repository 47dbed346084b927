"""Training-step overhead and memory of the tracer on a small transformer (CPU).

Overhead: the same model and loop, untraced and traced with ``every=1`` and ``every=10``,
interleaved in blocks within one process; the median over blocks of each block's mean step time
(measured and unmeasured steps together). A tracer's first two measurements are full site
discoveries (then it captures narrowly along the plan it found), a one-off cost that a real run
pays once, not per block. So each traced block first runs ``2 * every`` warm-up steps, timed
apart and reported as the one-off discovery cost, then times ``--steps`` steady-state steps,
including the final flush on leaving the ``with`` block (statistics are computed every
``flush_every`` = 16 measurements), and its periodic rediscovery when it falls inside the block.
Memory: peak RSS of fresh processes tracing 100 and 1000 steps (JSONL sink, and the in-memory
history). Targets: <= 5% (every=1), <= 1% (every=10); memory independent of the number of steps.

    .venv/bin/python benchmarks/trace_overhead.py [--blocks 10] [--steps 100]
"""

from __future__ import annotations

import argparse
import json
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


def make() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = SmallTransformer()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), ids, ids[:, 0] % CLASSES


def _step(model, opt, ids, y, tracer: Tracer | None) -> None:
    F.cross_entropy(model(ids), y).backward()
    opt.step()
    opt.zero_grad()
    if tracer is not None:
        tracer.step()


def block(model, opt, ids, y, steps: int, every: int | None, sinks=("memory",)) -> float:
    """Mean seconds per step over ``steps`` steps (traced with ``every`` unless None).

    A traced block returns its steady-state time: see :func:`traced_block`.
    """
    if every is not None:
        return traced_block(model, opt, ids, y, steps, every, sinks)[0]
    start = time.perf_counter()
    for _ in range(steps):
        _step(model, opt, ids, y, None)
    return (time.perf_counter() - start) / steps


def traced_block(
    model, opt, ids, y, steps: int, every: int, sinks=("memory",)
) -> tuple[float, float]:
    """(steady-state seconds per step, seconds of the ``2 * every`` discovery warm-up steps).

    The steady-state time covers ``steps`` steps after the warm-up and the final flush.
    """
    warmup = 2 * every
    with Tracer(model, every=every, sinks=list(sinks)) as tracer:
        start = time.perf_counter()
        for _ in range(warmup):
            _step(model, opt, ids, y, tracer)
        warm = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(steps):
            _step(model, opt, ids, y, tracer)
    return (time.perf_counter() - start) / steps, warm


def overhead(blocks: int, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median step seconds per configuration, and the median one-off discovery cost (seconds)."""
    model, opt, ids, y = make()
    for every in (None, 1, 10):
        block(model, opt, ids, y, 20, every)
    times: dict[str, list[float]] = {"plain": [], "every=1": [], "every=10": []}
    warmups: dict[str, list[float]] = {"every=1": [], "every=10": []}
    for _ in range(blocks):
        for every in (1, 10):
            times["plain"].append(block(model, opt, ids, y, steps, None))
            steady, warm = traced_block(model, opt, ids, y, steps, every)
            times[f"every={every}"].append(steady)
            warmups[f"every={every}"].append(warm)
    median = {k: statistics.median(v) for k, v in times.items()}
    discovery = {
        k: statistics.median(v) - 2 * int(k.split("=")[1]) * median["plain"]
        for k, v in warmups.items()
    }
    return median, discovery


def peak_rss(steps: int, sink: str) -> float:
    """Peak RSS (MiB) of a fresh process training ``steps`` traced steps."""
    with tempfile.TemporaryDirectory() as tmp:
        sinks = ["memory"] if sink == "memory" else [f"jsonl:{Path(tmp) / 'run.jsonl'}"]
        here = str(Path(__file__).parent)
        code = (
            f"import resource, sys, torch; sys.path.insert(0, {here!r}); torch.set_num_threads(1)\n"
            "from trace_overhead import make, block\n"
            f"m, o, i, y = make(); block(m, o, i, y, {steps}, 1, {sinks!r})\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100, help="steps per block (multiple of 10)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    med, discovery = overhead(args.blocks, args.steps)
    rss = {f"{s} steps, {k}": peak_rss(s, k) for k in ("jsonl", "memory") for s in (100, 1000)}
    result = {
        "step_ms": {k: 1e3 * v for k, v in med.items()},
        "overhead_pct": {k: 100 * (med[k] / med["plain"] - 1) for k in ("every=1", "every=10")},
        "discovery_ms": {k: 1e3 * v for k, v in discovery.items()},
        "peak_rss_mib": rss,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"small transformer: {LAYERS} layers, width {WIDTH}, {HEADS} heads, seq {SEQ}, batch {BATCH}; "
        f"1 thread; {args.blocks} interleaved blocks x {args.steps} steps"
    )
    print(f"{'config':<10} {'median ms/step':>15} {'overhead':>9} {'target':>7}")
    print(f"{'plain':<10} {result['step_ms']['plain']:>15.2f} {'':>9} {'':>7}")
    for k, target in (("every=1", 5.0), ("every=10", 1.0)):
        print(
            f"{k:<10} {result['step_ms'][k]:>15.2f} {result['overhead_pct'][k]:>8.2f}% {target:>6.0f}%"
        )
    print("one-off cost of the first two measurements (site discovery), beyond plain steps:")
    for k, v in result["discovery_ms"].items():
        print(f"  {k:<10} {v:8.1f} ms")
    print("peak RSS (MiB, fresh process, traced every=1):")
    for k, v in rss.items():
        print(f"  {k:<22} {v:8.1f}")


if __name__ == "__main__":
    main()

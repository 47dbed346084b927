"""The cost of tracing a compiled model: measured steps run eagerly, the others compiled.

A 2-layer width-64 ``nn.TransformerEncoder`` classifier (sequence 32, batch 32, SGD), compiled
with ``torch.compile`` (inductor), on one thread. After warm-up (compilation included there),
interleaved rounds time ``--steps`` training steps each of: the eager model, the compiled model,
and the compiled model inside a ``Tracer`` at ``every=1`` (every step measured, so every step
runs eagerly under the capture) and at ``every=10``. Prints milliseconds per step (median over
rounds) and each against the compiled model.

    PYTHONPATH=src python benchmarks/trace_compiled.py [--steps 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.machine import summary
from implicit_em.trace import Tracer


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.encoder(x).mean(1)), y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    print(f"machine: {summary('cpu')}")
    torch.manual_seed(0)
    model = Classifier()
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 32, 64), torch.randint(0, 10, (32,))

    def run(fn, tracer: Tracer | None) -> float:
        start = time.perf_counter()
        for _ in range(args.steps):
            fn(x, y).backward()
            opt.step()
            opt.zero_grad()
            if tracer is not None:
                tracer.step()
        return (time.perf_counter() - start) / args.steps * 1e3

    def traced(every: int) -> float:
        with Tracer(model, every=every, flush_every=args.steps) as tracer:
            return run(compiled, tracer)

    start = time.perf_counter()
    run(compiled, None)
    traced(1)
    print(f"warm-up with compilation: {time.perf_counter() - start:.1f} s")
    cases = {
        "eager": lambda: run(model, None),
        "compiled": lambda: run(compiled, None),
        "compiled, traced every=1": lambda: traced(1),
        "compiled, traced every=10": lambda: traced(10),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            times[name].append(case())
    base = statistics.median(times["compiled"])
    print(f"{'configuration':<28} {'ms/step':>8} {'vs compiled':>12}")
    for name, values in times.items():
        ms = statistics.median(values)
        print(f"{name:<28} {ms:8.2f} {ms / base:11.2f}x")


if __name__ == "__main__":
    main()

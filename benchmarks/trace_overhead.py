"""Training-step overhead of the tracer, traced against paused, in one run.

Configurations:

* ``realistic`` (CPU): a GPT of 4 layers x 256 (4 heads, SDPA, causal), sequence 128, batch 16,
  vocabulary 512, AdamW, on 2 threads (>= 100 ms per step). Targets: <= 3% at ``every=1``,
  <= 1% at ``every=10``.
* ``toy`` (CPU, a stress case): a 2-layer width-64 ``nn.TransformerEncoder`` classifier,
  sequence 32, batch 32, on 1 thread (about 10 ms per step, where the tracer's fixed costs
  show most). Acceptable: <= 10% at ``every=1``.
* ``gpu`` (CUDA only): a GPT-2-small shape (12 x 768, 12 heads), sequence 512, batch 8,
  vocabulary 50257, bf16 autocast, SDPA. Targets: <= 5% at ``every=1``, <= 1% at ``every=10``;
  also checks that the forward, backward and optimizer step of a measured step make no
  host-device synchronization (``torch.cuda.set_sync_debug_mode("error")``); the tracer's
  ``step()`` reads the step's metrics back once, for its alarms.

Method: one model and one loop per configuration. Inside one ``with Tracer(...)`` block,
traced blocks of steps alternate with blocks of the same length run under ``tracer.paused()``
(the same loop, nothing installed), in ABBA order. The blocks are short (``block`` steps at
``every=1``, one ``every``-step cycle otherwise) and many, so that the machine's drift
cancels between neighbours. The tracer flushes as it does by default, every 128 measurements (the
largest divisor of the traced measurements up to 128, so that every flush falls inside a timed
block), and the flush's time counts in the traced block where it happens. The overhead is (summed
traced time) / (summed paused time) - 1, with its standard error over pairs; the median pair
ratio is printed beside it.

``--breakdown`` says where a measured step's overhead goes instead: single forward and backward
passes are interleaved (plain, under an empty ``TorchFunctionMode``, under the capture with no
site kinds, i.e. the mode, the module hooks and the tensor naming, and under the capture with
every site kind), so the machine's drift cancels pass by pass; the means are printed with the
standard errors of their differences from the plain pass. Then one ``Tracer`` runs 128 steps to
warm up and ``--passes`` more, and the time spent in its ``step()`` calls (reducing the
measurement to records, the alarm rules, and the write of every 128 measurements' records) is
printed per step.

``--step-cpu STEPS`` prints, on one thread, the CPU time of the calling thread spent in each
measured step's ``Tracer.step()`` and in the training step itself (medians): a measure of the
tracer's own reduction that other jobs on a shared machine disturb far less than wall time.

    PYTHONPATH=src python benchmarks/trace_overhead.py [--config realistic toy] [--pairs N]
        [--pairs-10 N] [--block STEPS] [--every 1 10] [--breakdown] [--passes 300]
        [--step-cpu STEPS]

``--every K [K ...]`` measures other periods as well (default 1 and 10; the targets are for
those two). A period K other than 1 and 10 runs ``max(8, P // K)`` pairs of one K-step cycle
each, P being the pairs at ``every=1``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.machine import summary
from implicit_em.trace import CollapseWarning, Tracer
from implicit_em.trace.capture import SiteCapture, _Mode


class Block(nn.Module):
    """Pre-norm transformer block: causal SDPA self-attention and a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
        q, k, v = (t.view(b, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(b, length, width))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and the LM head."""

    def __init__(self, vocab: int, length: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class Toy(nn.Module):
    """Token embedding, a 2-layer width-64 TransformerEncoder (nn.MultiheadAttention), head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(64, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)).mean(1))


@dataclass
class Config:
    name: str
    describe: str
    threads: int
    device: str
    block: int
    pairs: tuple[int, int]
    targets: tuple[float, float]
    make: Callable[[str], tuple[nn.Module, Callable[[], torch.Tensor]]]
    autocast: bool = False


def _gpt(vocab: int, length: int, width: int, layers: int, heads: int, batch: int):
    def make(device: str) -> tuple[nn.Module, Callable[[], torch.Tensor]]:
        torch.manual_seed(0)
        model = GPT(vocab, length, width, layers, heads).to(device)
        ids = torch.randint(0, vocab, (batch, length + 1), device=device)
        x, y = ids[:, :-1], ids[:, 1:]
        return model, lambda: F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    return make


def _toy(device: str) -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    torch.manual_seed(0)
    model = Toy().to(device)
    ids = torch.randint(0, 100, (32, 32), device=device)
    return model, lambda: F.cross_entropy(model(ids), ids[:, 0] % 10)


CONFIGS = {
    "realistic": Config(
        "realistic",
        "GPT 4 layers x 256, 4 heads, SDPA, seq 128, batch 16, vocab 512, AdamW",
        2,
        "cpu",
        1,
        (128, 16),
        (3.0, 1.0),
        _gpt(512, 128, 256, 4, 4, 16),
    ),
    "toy": Config(
        "toy",
        "TransformerEncoder 2 layers x 64, 4 heads, seq 32, batch 32, AdamW (stress case)",
        1,
        "cpu",
        8,
        (128, 32),
        (10.0, 1.0),
        _toy,
    ),
    "gpu": Config(
        "gpu",
        "GPT-2-small shape 12 x 768, 12 heads, SDPA, seq 512, batch 8, vocab 50257, bf16",
        0,
        "cuda",
        4,
        (32, 16),
        (5.0, 1.0),
        _gpt(50257, 512, 768, 12, 12, 8),
        autocast=True,
    ),
}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _runner(cfg: Config) -> tuple[nn.Module, Callable[[Tracer | None], None]]:
    model, loss_fn = cfg.make(cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cfg.autocast else nullcontext

    def step(tracer: Tracer | None) -> None:
        with cast():
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if tracer is not None:
            tracer.step()

    return model, step


def _timed(step: Callable[[Tracer | None], None], n: int, tracer: Tracer | None, device: str):
    _sync(device)
    start = time.perf_counter()
    for _ in range(n):
        step(tracer)
    _sync(device)
    return time.perf_counter() - start


def overhead(cfg: Config, every: int, pairs: int) -> dict[str, float]:
    """ABBA pairs of traced / paused blocks inside one tracer (see the module docstring)."""
    model, step = _runner(cfg)
    steps = cfg.block if every == 1 else every
    measurements = pairs * (steps // every)
    flush_every = max(d for d in range(1, 129) if measurements % d == 0)
    with warnings.catch_warnings(), Tracer(model, every=every, flush_every=flush_every) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        for _ in range(2 * every):  # warm up: first measurements, allocator, kernels
            step(tracer)
        traced, plain = [], []
        for i in range(pairs):
            for is_traced in (True, False) if i % 2 == 0 else (False, True):
                if is_traced:
                    traced.append(_timed(step, steps, tracer, cfg.device))
                else:
                    with tracer.paused():
                        plain.append(_timed(step, steps, None, cfg.device))
    diffs = [t - p for t, p in zip(traced, plain, strict=True)]
    return {
        "summed_pct": 100 * sum(diffs) / sum(plain),
        "stderr_pct": 100 * statistics.stdev(diffs) * math.sqrt(pairs) / sum(plain),
        "median_pct": 100
        * (statistics.median(t / p for t, p in zip(traced, plain, strict=True)) - 1),
        "plain_ms": 1e3 * sum(plain) / (pairs * steps),
        "traced_ms": 1e3 * sum(traced) / (pairs * steps),
        "block": steps,
        "records": len(tracer.history),
    }


def sync_check(cfg: Config, steps: int = 5) -> str:
    """Run the training steps of measured steps (``every=1``; forward, backward, optimizer
    step, not ``tracer.step()``) under ``torch.cuda.set_sync_debug_mode("error")``: any
    host-device synchronization raises."""
    model, step = _runner(cfg)
    for _ in range(2):
        step(None)
    torch.cuda.synchronize()
    try:
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(steps):
                step(None)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    except RuntimeError as err:
        return f"the untraced loop itself synchronizes ({err}); no check possible"
    with Tracer(model, every=1, flush_every=10**6) as tracer:
        step(tracer)
        for _ in range(steps):
            torch.cuda.synchronize()
            try:
                torch.cuda.set_sync_debug_mode("error")
                step(None)
            except RuntimeError as err:
                return f"SYNC during a measured step: {err}"
            finally:
                torch.cuda.set_sync_debug_mode("default")
            tracer.step()
    return f"no host-device synchronization in {steps} measured training steps (tracer.step aside)"


def breakdown(cfg: Config, passes: int) -> None:
    """Print where the overhead of a measured step goes (see the module docstring)."""
    model, loss_fn = cfg.make(cfg.device)

    def forward_backward() -> None:
        loss_fn().backward()
        model.zero_grad(set_to_none=True)

    def under(capture: SiteCapture) -> Callable[[], None]:
        def run() -> None:
            capture.start()
            forward_backward()
            capture.release([capture.take()])

        return run

    mode = _Mode({}, {}, lambda t: t)  # the tracer's mode with nothing to observe or alias

    def under_mode() -> None:
        with mode:
            forward_backward()

    variants = {
        "plain forward + backward": forward_backward,
        "+ an empty TorchFunctionMode": under_mode,
        "+ module hooks, naming (no kinds)": under(SiteCapture(model, None, 1, 512, kinds=())),
        "+ every site kind (the capture)": under(SiteCapture(model, None, 1, 512)),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(passes + 10):
        for name, run in variants.items():
            _sync(cfg.device)
            start = time.perf_counter()
            run()
            _sync(cfg.device)
            if i >= 10:  # warm-up passes
                times[name].append(time.perf_counter() - start)
    plain = times["plain forward + backward"]
    base = sum(plain) / passes
    print(f"{'interleaved passes':<36} {'ms/pass':>8} {'added ms':>15} {'% of plain':>10}")
    for name, t in times.items():
        mean = sum(t) / passes
        diffs = [a - b for a, b in zip(t, plain, strict=True)]
        err = (
            statistics.stdev(diffs) / math.sqrt(passes) if name != "plain forward + backward" else 0
        )
        added = f"{1e3 * (mean - base):.3f} ± {1e3 * err:.3f}"
        print(f"{name:<36} {1e3 * mean:>8.3f} {added:>15} {100 * (mean - base) / base:>9.1f}%")
    model, step = _runner(cfg)
    steps, spent = 128 * max(1, round(passes / 128)), 0.0
    with warnings.catch_warnings(), Tracer(model, flush_every=128) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        for i in range(128 + steps):  # the first 128 (one flush) warm up
            step(None)
            start = time.perf_counter()
            tracer.step()
            if i >= 128:
                spent += time.perf_counter() - start
    print(
        f"Tracer.step() over {steps} measured steps (reducing each measurement, the alarm "
        f"rules, a write every 128, after 128 to warm up): {1e3 * spent / steps:.3f} ms per step"
    )


def step_cpu(cfg: Config, steps: int) -> None:
    """Print the CPU time of the calling thread in ``tracer.step()`` and in the training step,
    on one thread (``every=1``, median over ``steps`` steps after 10 to warm up): the tracer's
    own reduction, nearly independent of other jobs on the machine, unlike wall time. (`main`
    sets the one thread.)"""
    model, step = _runner(cfg)
    train, own = [], []
    with warnings.catch_warnings(), Tracer(model, flush_every=16) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        for i in range(10 + steps):
            start = time.thread_time()
            step(None)
            middle = time.thread_time()
            tracer.step()
            if i >= 10:
                train.append(middle - start)
                own.append(time.thread_time() - middle)
    print(
        f"CPU time on 1 thread over {steps} measured steps (median): training step "
        f"{1e3 * statistics.median(train):.1f} ms, Tracer.step() "
        f"{1e3 * statistics.median(own):.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", nargs="+", default=["realistic", "toy", "gpu"])
    parser.add_argument("--pairs", type=int, default=None, help="block pairs at every=1")
    parser.add_argument("--pairs-10", type=int, default=None, help="block pairs at every=10")
    parser.add_argument("--block", type=int, default=None, help="steps per block at every=1")
    parser.add_argument(
        "--every", type=int, nargs="+", default=[1, 10], help="measurement periods to time"
    )
    parser.add_argument("--breakdown", action="store_true", help="where the overhead goes")
    parser.add_argument("--passes", type=int, default=300, help="interleaved passes (breakdown)")
    parser.add_argument(
        "--step-cpu", type=int, default=None, help="CPU time of Tracer.step() over N steps"
    )
    args = parser.parse_args()
    if any(k < 1 for k in args.every):
        parser.error(f"--every: expected positive integers, got {args.every}")
    for name in args.config:
        cfg = CONFIGS[name]
        if args.block is not None:
            cfg.block = args.block
        if cfg.device == "cuda" and not torch.cuda.is_available():
            print(f"\n[{name}] skipped: no CUDA device")
            continue
        if cfg.threads:
            torch.set_num_threads(1 if args.step_cpu else cfg.threads)
        print(f"\n[{name}] {cfg.describe}")
        print(f"machine: {summary(cfg.device)}")
        if args.breakdown:
            breakdown(cfg, args.passes)
            continue
        if args.step_cpu:
            step_cpu(cfg, args.step_cpu)
            continue
        header = (
            f"{'every':>5} {'pairs':>5} {'block':>5} {'paused ms':>9} {'traced ms':>9} "
            f"{'overhead':>15} {'median':>7} {'target':>6}"
        )
        print(header)
        pairs_1 = args.pairs or cfg.pairs[0]
        for every in args.every:
            pairs = {1: pairs_1, 10: args.pairs_10 or cfg.pairs[1]}.get(
                every, max(8, pairs_1 // every)
            )
            target = {1: f"{cfg.targets[0]:.0f}%", 10: f"{cfg.targets[1]:.0f}%"}.get(every, "-")
            r = overhead(cfg, every, pairs)
            spread = f"{r['summed_pct']:.2f}% ± {r['stderr_pct']:.2f}"
            print(
                f"{every:>5} {pairs:>5} {r['block']:>5} {r['plain_ms']:>9.1f} "
                f"{r['traced_ms']:>9.1f} {spread:>15} {r['median_pct']:>6.2f}% {target:>6}"
            )
        if cfg.device == "cuda":
            print(sync_check(cfg))


if __name__ == "__main__":
    main()

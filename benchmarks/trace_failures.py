"""Induced training failures, caught (or not) by the tracer's alarms, against matched controls.

Four failures, each induced in a small model on CPU and paired with a healthy control that
differs only in the cause (same seed, data, initialization and length):

* ``attention``: attention entropy collapse (Zhai et al. 2023). A one-layer causal
  transformer (SDPA) copies the token three positions back; Adam at a raised learning rate,
  without warm-up, against the same model at a usual one.
* ``router``: router collapse. A top-1 mixture of experts (softmax gate, Switch-style)
  classifies clustered inputs; trained without a balancing loss, against the same model with
  the Switch auxiliary loss.
* ``logits``: output-logit growth, log Z drift. A small next-token model (embedding, MLP,
  head) on a Markov chain; Adam at a high learning rate without a z-loss, against the same
  model at a usual one.
* ``dead``: dead units. Distance units (squared-Euclidean prototypes) under the mixture NLL
  on clustered data; three of eight prototypes started far outside the data (at four times
  their cluster centre), against every prototype started at its cluster centre.

For each seed: the step of the first alarm of the induced run (and its rule), the step at
which its loss first shows the failure (the smoothed loss more than 10% and 0.05 nats above
the control's at the same step, for 5 consecutive steps, or a non-finite loss), the lead time
(loss step minus alarm step; positive: the alarm came first) and the alarms of the control (false
alarms). A failure the alarms miss, or that the loss never shows, is printed as such.

    PYTHONPATH=src python benchmarks/trace_failures.py [--scenario attention router logits dead]
        [--seeds 0 1 2] [--steps N]
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from implicit_em import objectives
from implicit_em.distances import SquaredEuclidean
from implicit_em.machine import summary
from implicit_em.trace import CollapseWarning, Tracer

LOSS_MARGIN = 1.10
"""The induced run's smoothed loss must exceed the control's by this factor ..."""
LOSS_GAP = 0.05
"""... and by this many nats ..."""
LOSS_PERSIST = 5
"""... for this many consecutive steps for the loss to show the failure."""
SMOOTH = 5
"""Steps in the moving average of the loss."""


@dataclass
class Run:
    """One training run: its per-step loss and the tracer's alarms."""

    losses: list[float]
    alarms: list[dict]
    seconds: float


@dataclass
class Scenario:
    """A failure and its control: `train(seed, induced)` runs one of them."""

    name: str
    induced: str
    control: str
    steps: int
    train: Callable[[int, bool, int], Run]


def _traced(model: nn.Module, steps: int, step: Callable[[], torch.Tensor]) -> Run:
    """Run `steps` training steps (`step()` returns the loss after its optimizer step) under a
    tracer measuring every step; collect the loss and the alarms."""
    losses = []
    start = time.perf_counter()
    with warnings.catch_warnings(), Tracer(model, every=1, flush_every=10**6) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        for _ in range(steps):
            losses.append(float(step()))
            tracer.step()
    return Run(losses, tracer.alarms, time.perf_counter() - start)


# -- attention entropy collapse ----------------------------------------------------------------


class _CopyBack(nn.Module):
    """One pre-norm causal self-attention block (SDPA) and an MLP over token and position
    embeddings; predicts every position's token three positions back."""

    def __init__(self, vocab: int, length: int, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(length, width)
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.head = nn.Linear(width, vocab)
        self.heads = heads

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, n = ids.shape
        h = self.tok(ids) + self.pos(torch.arange(n))
        q, k, v = self.qkv(self.norm(h)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, n, -1))
        h = h + self.mlp(h)
        return self.head(h)


def _attention(seed: int, induced: bool, steps: int) -> Run:
    vocab, length, batch, back = 32, 32, 32, 3
    torch.manual_seed(seed)
    model = _CopyBack(vocab, length)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2 if induced else 1e-3)
    data = torch.Generator().manual_seed(1000 + seed)

    def step() -> torch.Tensor:
        ids = torch.randint(0, vocab, (batch, length), generator=data)
        z = model(ids)[:, back:]
        loss = F.cross_entropy(z.reshape(-1, vocab), ids[:, :-back].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return _traced(model, steps, step)


# -- router collapse -----------------------------------------------------------------------------


class _SwitchMoE(nn.Module):
    """A top-1 mixture of MLP experts behind a softmax gate (Switch), then a linear head; the
    Switch auxiliary loss N·Σ f_i P_i of the last call in `aux`."""

    def __init__(self, inputs: int, classes: int, experts: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.gate = nn.Linear(inputs, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, classes))
            for _ in range(experts)
        )
        self.aux = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = F.softmax(self.gate(x), dim=-1)
        w, index = p.max(dim=-1)
        out = torch.stack([e(x) for e in self.experts], 1)  # [T, E, C]
        chosen = out.gather(1, index.view(-1, 1, 1).expand(-1, 1, out.shape[-1])).squeeze(1)
        load = F.one_hot(index, p.shape[-1]).float().mean(0)
        self.aux = p.shape[-1] * (load * p.mean(0)).sum()
        return w.unsqueeze(-1) * chosen


AUX = 1.0
"""The control's coefficient of the Switch auxiliary loss (0.01 in Switch's large batches;
this small model needs more to stay balanced)."""


def _router(seed: int, induced: bool, steps: int) -> Run:
    inputs, classes, clusters, batch = 8, 8, 16, 128
    g = torch.Generator().manual_seed(2000 + seed)
    centers = 2.0 * torch.randn(clusters, inputs, generator=g)
    labels = torch.randint(0, classes, (clusters,), generator=g)
    torch.manual_seed(seed)
    model = _SwitchMoE(inputs, classes)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def step() -> torch.Tensor:
        c = torch.randint(0, clusters, (batch,), generator=g)
        x = centers[c] + 0.5 * torch.randn(batch, inputs, generator=g)
        loss = F.cross_entropy(model(x), labels[c])
        total = loss if induced else loss + AUX * model.aux
        total.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return _traced(model, steps, step)


# -- output-logit growth -------------------------------------------------------------------------


class _NextToken(nn.Module):
    """Embedding, a two-layer MLP and a head: next-token logits from the current token."""

    def __init__(self, vocab: int, width: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Embedding(vocab, width), nn.Linear(width, width), nn.GELU())
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(ids))


def _logits(seed: int, induced: bool, steps: int) -> Run:
    vocab, batch = 64, 256
    g = torch.Generator().manual_seed(3000 + seed)
    transition = torch.softmax(3.0 * torch.randn(vocab, vocab, generator=g), -1)
    torch.manual_seed(seed)
    model = _NextToken(vocab)
    opt = torch.optim.Adam(model.parameters(), lr=0.5 if induced else 5e-3)

    def step() -> torch.Tensor:
        ids = torch.randint(0, vocab, (batch,), generator=g)
        nxt = torch.multinomial(transition[ids], 1, generator=g).squeeze(-1)
        z = model(ids)
        loss = F.cross_entropy(z, nxt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return _traced(model, steps, step)


# -- dead units ------------------------------------------------------------------------------------


class _Prototypes(nn.Module):
    """Squared-Euclidean distances to `units` prototypes (the mixture's components)."""

    def __init__(self, inputs: int, units: int) -> None:
        super().__init__()
        self.layer = SquaredEuclidean(inputs, units)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def _dead(seed: int, induced: bool, steps: int) -> Run:
    inputs, units, batch = 2, 8, 256
    g = torch.Generator().manual_seed(4000 + seed)
    centers = 4.0 * torch.randn(units, inputs, generator=g)
    torch.manual_seed(seed)
    model = _Prototypes(inputs, units)
    with torch.no_grad():
        start = centers[torch.randperm(units, generator=g)] + 0.3 * torch.randn(
            units, inputs, generator=g
        )
        if induced:  # three prototypes start far outside the data
            start[:3] = start[:3] * 4.0
        model.layer.prototypes.copy_(start)
    opt = torch.optim.Adam(model.parameters(), lr=5e-2)

    def step() -> torch.Tensor:
        c = torch.randint(0, units, (batch,), generator=g)
        x = centers[c] + 0.7 * torch.randn(batch, inputs, generator=g)
        loss = objectives.mixture_nll(model(x))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return _traced(model, steps, step)


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "attention",
            "attention entropy collapse: Adam lr 3e-2, no warm-up",
            "the same at lr 1e-3",
            200,
            _attention,
        ),
        Scenario(
            "router",
            "router collapse: top-1 MoE, no balancing loss",
            "the same with the Switch auxiliary loss (1.0 · N·Σ f_i P_i)",
            150,
            _router,
        ),
        Scenario(
            "logits",
            "logit growth / log Z drift: Adam lr 0.5, no z-loss",
            "the same at lr 5e-3",
            150,
            _logits,
        ),
        Scenario(
            "dead",
            "dead units: three of eight prototypes started at 4 × their cluster centre",
            "every prototype started at its cluster centre",
            150,
            _dead,
        ),
    )
}


def _smooth(losses: list[float]) -> list[float]:
    out = []
    for i in range(len(losses)):
        window = losses[max(0, i - SMOOTH + 1) : i + 1]
        out.append(sum(window) / len(window))
    return out


def loss_shows(induced: list[float], control: list[float]) -> int | None:
    """The first step from which the induced run's smoothed loss stays above
    `LOSS_MARGIN` × the control's and `LOSS_GAP` above it for `LOSS_PERSIST` steps (or is
    non-finite); None if never."""
    a, b = _smooth(induced), _smooth(control)
    for t in range(len(a)):
        if not math.isfinite(a[t]):
            return t
        window = range(t, min(t + LOSS_PERSIST, len(a)))
        if len(window) == LOSS_PERSIST and all(
            not math.isfinite(a[u]) or (a[u] > LOSS_MARGIN * b[u] and a[u] - b[u] > LOSS_GAP)
            for u in window
        ):
            return t
    return None


def _names(alarms: list[dict]) -> str:
    """Each rule that fired: how many times, from which step."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for a in alarms:
        counts[a["alarm"]] = counts.get(a["alarm"], 0) + 1
        first.setdefault(a["alarm"], a["step"])
    return ", ".join(f"{k} ×{v} from {first[k]}" for k, v in sorted(counts.items())) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("implicit_em.trace").setLevel(logging.ERROR)  # alarms are counted here
    print(f"machine: {summary('cpu')}")
    print(f"torch {torch.__version__}, 1 thread")
    for name in args.scenario:
        s = SCENARIOS[name]
        steps = args.steps or s.steps
        print(f"\n[{name}] induced: {s.induced}; control: {s.control}; {steps} steps")
        print(
            f"{'seed':>4} {'first alarm':>11} {'rule':<28} {'loss shows':>10} {'lead':>5} "
            f"{'final loss (ind/ctl)':>21} {'control alarms':<30} {'s/run':>5}"
        )
        for seed in args.seeds:
            bad, good = s.train(seed, True, steps), s.train(seed, False, steps)
            first = bad.alarms[0] if bad.alarms else None
            shows = loss_shows(bad.losses, good.losses)
            lead = "—" if first is None or shows is None else str(shows - first["step"])
            alarm_step = "missed" if first is None else str(first["step"])
            rule = "—" if first is None else f"{first['alarm']}"
            final = f"{bad.losses[-1]:.3g} / {good.losses[-1]:.3g}"
            seen = "never" if shows is None else shows
            print(
                f"{seed:>4} {alarm_step:>11} {rule:<28} {seen:>10} "
                f"{lead:>5} {final:>21} {_names(good.alarms):<30} "
                f"{(bad.seconds + good.seconds) / 2:>5.1f}"
            )
            print(f"     induced-run alarms: {_names(bad.alarms)}")


if __name__ == "__main__":
    main()

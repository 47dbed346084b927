r"""E20's attention model: a one-block transformer classifier whose attention entropy collapses
under a high learning rate, from training itself.

Task: sequences of $T$ tokens from a vocabulary of $V$; the label is the most frequent token
(ties to the smallest). Answering needs broad attention over the sequence, so a healthy model
keeps its attention entropy near $\log(T + 1)$.

Model: a learned query token prepended, token and position embeddings, one attention block
without QK-norm and without a norm before the query-key projection (`F.scaled_dot_product_attention`,
`heads` heads), a pre-LN ReLU MLP, a linear head on the query token. Adam with a linear warm-up
over `warmup` steps to the arm's peak learning rate (`config["lr"][arm]`), then constant:
Zhai et al. (2023) observe entropy collapse when the rate is too high for the model.

Ground truth, afterwards, from held-out behaviour, not from the attention weights the tracer
reads: every `every` steps, on a held-out batch, the attention's ablation cost, the
cross-entropy with every position's attention output replaced by its mean over the batch (the
block then passes on nothing about the sequence) minus the intact model's
(`MajorityTransformer.ablation_cost`). The majority of the sequence can only be read through
attention, so a model whose attention works pays for losing it; the run's attention is dead
when its last reading costs less than `ablation_tol` nats, with onset the first reading from
which every later one stays below it. The `planted` arm (trained at the low rate) multiplies
the query and key weights by `plant_scale` at step `plant_step`, which scales every attention
logit by `plant_scale`²: an intervention that defines the collapse, with onset `plant_step`.
The entropy reading of the first version (held-out mean attention entropy below
`collapse_ratio` $\times \log(T + 1)$ at the end), the quantity the tracer's
`attention_entropy_collapse` alarm reads, is kept as `entropy_event`.

Beside the tracer, the forward-softmax monitor (`_forward_monitors.first_drop`) reads each head's
mean entropy of its forward attention weights on each measured step's batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.report.experiments._event_training import run_reading, train_traced
from implicit_em.report.experiments._forward_monitors import first_drop

__all__ = ["MajorityTransformer", "attention_run", "majority_task"]


def majority_task(config: Mapping[str, Any], n: int, seed: int) -> tuple[Tensor, Tensor]:
    """`n` sequences `[n, T]` of tokens below `vocab` and their most frequent token `[n]`."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, config["vocab"], (n, config["length"]), generator=g)
    return x, F.one_hot(x, config["vocab"]).sum(1).argmax(-1)


class MajorityTransformer(nn.Module):
    """One attention block over a prepended query token; `forward(x [N, T])` gives the class
    logits `[N, V]`, `entropy(x)` the mean attention entropy in nats."""

    def __init__(self, vocab: int, length: int, width: int, heads: int) -> None:
        super().__init__()
        self.heads, self.query = heads, vocab
        self.embed = nn.Embedding(vocab + 1, width)
        self.position = nn.Parameter(0.1 * torch.randn(length + 1, width))
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width)
        )
        self.head = nn.Linear(width, vocab)

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        tokens = torch.cat([torch.full_like(x[:, :1], self.query), x], 1)
        h = self.embed(tokens) + self.position
        n, length, width = h.shape

        def split(t: Tensor) -> Tensor:
            return t.view(n, length, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = self.qkv(h).chunk(3, dim=-1)
        return h, split(q), split(k), split(v)

    def forward(self, x: Tensor, ablate: bool = False) -> Tensor:
        """`ablate`: every position's attention output replaced by its mean over the batch."""
        h, q, k, v = self._qkv(x)
        a = F.scaled_dot_product_attention(q, k, v)
        if ablate:
            a = a.mean(0, keepdim=True).expand_as(a)
        h = h + self.out(a.transpose(1, 2).reshape(h.shape))
        h = h + self.mlp(self.norm(h))
        return self.head(h[:, 0])

    def head_entropy(self, x: Tensor) -> Tensor:
        r"""`[heads]`: per head, the mean over batch and query positions of the entropy of its
        attention weights $\operatorname{softmax}(q k^\top / \sqrt{d_h})$, in nats."""
        _, q, k, _ = self._qkv(x)
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        return -(w * torch.log(w.clamp_min(1e-30))).sum(-1).mean((0, 2))

    def entropy(self, x: Tensor) -> float:
        """Mean over batch, heads and query positions of the attention weights' entropy."""
        return float(self.head_entropy(x).mean())

    def ablation_cost(self, x: Tensor, y: Tensor) -> float:
        """The cross-entropy of `(x, y)` with the attention ablated minus the intact model's."""
        return float(F.cross_entropy(self(x, ablate=True), y) - F.cross_entropy(self(x), y))


def _collapse_onset(readings: list[tuple[int, float]], threshold: float) -> int | None:
    """The step of the first reading from which every later one is below `threshold`; None
    when the last reading is not."""
    onset = None
    for t, h in readings:
        onset = (t if onset is None else onset) if h < threshold else None
    return onset


def attention_run(config: Mapping[str, Any], seed: int, arm: str) -> dict[str, Any]:
    """Train the transformer of `config` under arm `arm` (its peak learning rate
    `config["lr"][arm]`; the `planted` arm trains at the `low` rate and has its query and key
    weights scaled at `plant_step`) from seed `seed`; the run's reading (`run_reading`) with
    the held-out accuracy and the last entropy reading."""
    steps, batch, every = config["steps"], config["batch"], config["every"]
    x, y = majority_task(config, config["n_train"], seed)
    x_test, y_test = majority_task(config, config["n_test"], seed + 10**6)
    torch.manual_seed(seed)
    model = MajorityTransformer(config["vocab"], config["length"], config["width"], config["heads"])
    lr = config["lr"]["low" if arm == "planted" else arm]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    warmup = config["warmup"]
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1.0, (t + 1) / warmup))
    g = torch.Generator().manual_seed(seed + 1)
    order = torch.randint(0, x.shape[0], (steps, batch), generator=g)
    readings: list[tuple[int, float]] = []
    costs: list[tuple[int, float]] = []
    heads: list[tuple[int, list[float]]] = []
    width = config["width"]

    def loss_of(t: int) -> Tensor:
        if arm == "planted" and t == config["plant_step"]:
            with torch.no_grad():
                model.qkv.weight[: 2 * width] *= config["plant_scale"]
        return F.cross_entropy(model(x[order[t]]), y[order[t]])

    def observe(t: int) -> None:
        with torch.no_grad():
            if t % every == 0:
                heads.append((t, model.head_entropy(x[order[t]]).tolist()))
            if t % every == 0 or t == steps - 1:
                probe = x_test[: config["probe"]], y_test[: config["probe"]]
                readings.append((t, model.entropy(probe[0])))
                costs.append((t, model.ablation_cost(*probe)))

    log = train_traced(model, opt, loss_of, steps, every, observe, schedule)
    threshold = config["collapse_ratio"] * math.log(config["length"] + 1)
    onset = (
        config["plant_step"] if arm == "planted" else _collapse_onset(costs, config["ablation_tol"])
    )
    forward = first_drop(heads, config["collapse_ratio"])
    reading = run_reading(log, onset, steps, config["monitor"], forward)
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(-1) == y_test).float().mean())
        cost = model.ablation_cost(x_test, y_test)
    reading.update(
        accuracy=accuracy,
        entropy=readings[-1][1],
        entropy_event=_collapse_onset(readings, threshold) is not None,
        ablation_cost=cost,
    )
    return reading

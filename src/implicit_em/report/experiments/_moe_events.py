r"""E20's mixture of experts: top-$k$ routing on a clustered task, trained with and without the
load-balancing loss, where dead experts come from training itself.

Task: $C$ Gaussian clusters in $\mathbb R^D$ (centres $3\,\mathcal N(0, I)$, unit noise), each with
its own linear labelling rule, $y = \arg\max_c (x - \mu_{c(x)})^\top R_{c(x)}$: an expert that
owns a cluster can learn its rule. Centres and rules are drawn from `task_seed`, the samples
from the run's seed.

Model: a router $z = W_r x + b_r$, $p = \operatorname{softmax}(z)$ over $E$ experts, the top-$k$
of $p$ dispatch each token, and the output is $\sum_{i\in\text{top-}k} p_i\, f_i(x)$ with
$f_i$ a one-hidden-layer ReLU MLP. Loss: cross-entropy plus, in the balanced arm, the Switch
Transformer's auxiliary loss $\alpha\, E \sum_i f_i P_i$ ($f_i$ the share of the batch's
assignments routed to expert $i$, $P_i$ its mean router probability).

Ground truth, afterwards, from held-out behaviour, not from the routing the tracer reads: the
ablation cost of expert $i$ is the held-out cross-entropy with $i$ removed from the router
($z_i = -\infty$, its tokens sent to their next choice) minus the intact model's
(`ablation_costs`); an expert is dead when its ablation costs less than `ablation_tol` nats (the
model does not use it). Two arms plant dead experts by an intervention, which then defines them
dead from step 0: `planted` forces the router biases of `planted_dead` experts to
$-$`planted_bias` (never routed), `zeroed` holds those experts' output weights at zero (still
routed, contributing nothing). A natural dead expert's onset is one step after the last training
batch that routed a token to it. The load reading of the first version (an expert with less than
`dead_share` of its fair share $1/E$ of the held-out assignments), the quantity the tracer's
`dead_experts` alarm reads, is kept as `dead_by_load`. Specialisation: per cluster, the share of
its held-out tokens whose first choice is the cluster's most frequent expert, averaged over
clusters.

Beside the tracer, the forward-softmax monitor (`_forward_monitors.first_starved`) reads each
step's mean forward routing weight per expert.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.report.experiments._event_training import onset_of, run_reading, train_traced
from implicit_em.report.experiments._forward_monitors import first_starved, measured

__all__ = [
    "INTERVENTIONS",
    "TopKMoE",
    "ablation_costs",
    "cluster_task",
    "loads",
    "moe_run",
    "purity",
]

INTERVENTIONS = ("planted", "zeroed")
"""The arms whose dead experts an intervention defines."""


def cluster_task(config: Mapping[str, Any], n: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """`n` samples `(x [n, D], y [n], cluster [n])` of the clustered task of `config`."""
    dim, clusters, classes = config["dim"], config["clusters"], config["classes"]
    g = torch.Generator().manual_seed(config["task_seed"])
    centres = 3.0 * torch.randn(clusters, dim, generator=g)
    rules = torch.randn(clusters, dim, classes, generator=g)
    g = torch.Generator().manual_seed(seed)
    c = torch.randint(0, clusters, (n,), generator=g)
    x = centres[c] + torch.randn(n, dim, generator=g)
    y = torch.einsum("nd,ndk->nk", x - centres[c], rules[c]).argmax(-1)
    return x, y, c


class TopKMoE(nn.Module):
    r"""A top-$k$ mixture of $E$ one-hidden-layer experts: `forward(x [N, D])` gives the output
    logits `[N, classes]`, the router probabilities `[N, E]` and the dispatched experts
    `[N, k]`. Experts are computed densely (all of them, then gathered): exact for a small
    model, with the routing the same as a sparse dispatch."""

    def __init__(self, dim: int, experts: int, hidden: int, classes: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, experts)
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) / dim**0.5)
        self.b1 = nn.Parameter(torch.zeros(experts, hidden))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, classes) / hidden**0.5)

    def forward(self, x: Tensor, without: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        r"""`without`: an expert removed from the router (its logit $-\infty$)."""
        z = self.router(x)
        if without is not None:
            z = z.index_fill(-1, torch.tensor([without]), float("-inf"))
        probs = torch.softmax(z, dim=-1)
        gates, index = torch.topk(probs, self.top_k, dim=-1)
        hidden = torch.relu(torch.einsum("nd,edh->neh", x, self.w1) + self.b1)
        out = torch.einsum("neh,ehc->nec", hidden, self.w2)
        chosen = out.gather(1, index.unsqueeze(-1).expand(-1, -1, out.shape[-1]))
        return (gates.unsqueeze(-1) * chosen).sum(1), probs, index


def loads(index: Tensor, experts: int) -> Tensor:
    """The share of the assignments `index` routed to each expert, `[experts]`."""
    counts = torch.bincount(index.reshape(-1), minlength=experts).to(torch.float32)
    return counts / index.numel()


def ablation_costs(model: TopKMoE, x: Tensor, y: Tensor) -> list[float]:
    """Per expert, the cross-entropy of `(x, y)` with that expert removed from the router minus
    the intact model's, in nats."""
    with torch.no_grad():
        intact = float(F.cross_entropy(model(x)[0], y))
        experts = model.router.out_features
        return [float(F.cross_entropy(model(x, i)[0], y)) - intact for i in range(experts)]


def purity(index: Tensor, clusters: Tensor, n_clusters: int) -> float:
    """Per cluster, the share of its tokens whose first choice is its most frequent expert;
    the mean over the clusters present."""
    shares = []
    for c in range(n_clusters):
        first = index[clusters == c, 0]
        if first.numel():
            shares.append(float(torch.bincount(first).max()) / first.numel())
    return sum(shares) / len(shares)


def moe_run(config: Mapping[str, Any], seed: int, arm: str) -> dict[str, Any]:
    """Train the mixture of experts of `config` under arm `arm` (`config["balance"][arm]`, the
    auxiliary loss's coefficient; `config["planted_dead"]` experts with router bias
    `-config["planted_bias"]` when the arm is `planted`, with output weights held at zero when
    it is `zeroed`) from seed `seed`; the run's reading (`run_reading`, the forward monitor's
    first step included) with accuracy, specialisation, the ablation costs and the dead
    experts."""
    experts, batch, steps = config["experts"], config["batch"], config["steps"]
    x, y, _ = cluster_task(config, config["n_train"], seed)
    x_test, y_test, c_test = cluster_task(config, config["n_test"], seed + 10**6)
    torch.manual_seed(seed)
    model = TopKMoE(config["dim"], experts, config["hidden"], config["classes"], config["top_k"])
    balance = config["balance"].get(arm, 0.0)
    planted = config["planted_dead"]
    if arm == "planted":
        with torch.no_grad():
            model.router.bias[:planted] = -config["planted_bias"]
    if arm == "zeroed":
        with torch.no_grad():
            model.w2[:planted] = 0.0
        model.w2.register_hook(lambda g: g.index_fill(0, torch.arange(planted), 0.0))
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    g = torch.Generator().manual_seed(seed + 1)
    order = torch.randint(0, x.shape[0], (steps, batch), generator=g)
    last_active = [-1] * experts
    weights: list[list[float]] = []

    def loss_of(t: int) -> Tensor:
        logits, probs, index = model(x[order[t]])
        weights.append(probs.detach().mean(0).tolist())
        loss = F.cross_entropy(logits, y[order[t]])
        load = loads(index.detach(), experts)
        for i in torch.nonzero(load > 0).reshape(-1).tolist():
            last_active[i] = t
        if balance:
            loss = loss + balance * experts * (load * probs.mean(0)).sum()
        return loss

    log = train_traced(model, opt, loss_of, steps, config["every"], lambda t: None)
    with torch.no_grad():
        logits, _, index = model(x_test)
    share = loads(index, experts) * experts
    by_load = [bool(s < config["dead_share"]) for s in share.tolist()]
    costs = ablation_costs(model, x_test, y_test)
    dead = [c < config["ablation_tol"] for c in costs]
    if arm in INTERVENTIONS:
        dead[:planted] = [True] * planted
        last_active[:planted] = [-1] * planted
    forward = first_starved(
        measured(weights, config["every"]), config["window"], config["dead_share"] / experts
    )
    reading = run_reading(log, onset_of(last_active, dead), steps, config["monitor"], forward)
    reading.update(
        dead=sum(dead),
        dead_by_load=sum(by_load),
        ablation_min=min(costs),
        accuracy=float((logits.argmax(-1) == y_test).float().mean()),
        purity=purity(index, c_test, config["clusters"]),
        min_share=float(share.min()),
    )
    return reading

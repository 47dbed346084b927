r"""E9's top-$k$ part: a small transformer whose feed-forward layer is a top-$k$ mixture of
experts, on a sequence task with a known latent assignment per token.

Task: sequences of $T$ tokens, each token $x_t \in \mathbb R^D$ drawn from one of $C$ Gaussian
clusters with its own linear labelling rule (`_moe_events.cluster_task`, one draw per token):
the cluster is the token's latent assignment, its label $y_t$ the cluster's rule.

Model (pre-LN, nanoGPT's shape): $h = W_e x + P$ (a token projection and learned positions);
per layer $h \leftarrow h + \operatorname{Attn}(\operatorname{LN}(h))$ (causal-free softmax
attention, `heads` heads, `F.scaled_dot_product_attention`) and
$h \leftarrow h + \operatorname{MoE}(\operatorname{LN}(h))$ with the MoE `_moe_events.TopKMoE`
over the $N = B T$ token rows (router $p = \operatorname{softmax}(W_r u + b_r)$, the top-$k$
of $p$ dispatch, the output $\sum_{i \in \text{top-}k} p_i f_i(u)$); a linear head per token.
Loss: the tokens' cross-entropy plus the Switch Transformer's balancing loss
$\alpha E \sum_i f_i P_i$ per layer, as top-$k$ routers are trained in practice.

Arms: `trained`, the router trained by that loss; `frozen`, the same model and training with
the router's weights fixed at their random initialization (a learned-free, content-dependent
dispatch: hashing by random hyperplanes), so that only its gradients through the softmax, the
router's responsibilities, are taken out. The known-answer control `planted` trains the router
too, with `planted_bias` added to the logit of expert $c \bmod E$ of each token of cluster $c$:
the routing follows the latent assignment by construction.

Read afterwards on held-out sequences: specialisation, per cluster the share of its tokens
whose first choice (first layer) is the cluster's most frequent expert, averaged over clusters
(`_moe_events.purity`); the held-out token accuracy; and, from the tracer on during training,
the largest residual of the router's responsibilities read from its gradients against its
softmax (the softmax Jacobian identity).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.report.experiments._event_training import train_traced
from implicit_em.report.experiments._experts import matched_purity
from implicit_em.report.experiments._moe_events import TopKMoE, cluster_task, loads, purity

__all__ = ["ARMS", "MoETransformer", "sequence_task", "topk_run"]

ARMS = ("trained", "frozen", "planted")
"""The router trained by the objective; fixed at its random initialization; trained, with the
specialisation planted (the known-answer control)."""


def sequence_task(config: Mapping[str, Any], n: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """`n` sequences of `config["length"]` tokens: `(x [n, T, D], y [n, T], cluster [n, T])`."""
    length = config["length"]
    x, y, c = cluster_task(config, n * length, seed)
    return x.view(n, length, -1), y.view(n, length), c.view(n, length)


class _Block(nn.Module):
    """One pre-LN block: softmax attention, then the top-$k$ mixture of experts."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        width = config["width"]
        self.heads = config["heads"]
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.moe = TopKMoE(width, config["experts"], config["hidden"], width, config["top_k"])

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        n, length, width = h.shape
        q, k, v = self.qkv(self.norm1(h)).chunk(3, dim=-1)
        q, k, v = (t.view(n, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        h = h + self.out(a.transpose(1, 2).reshape(n, length, width))
        out, probs, index = self.moe(self.norm2(h).reshape(n * length, width))
        return h + out.view(n, length, width), probs, index


class MoETransformer(nn.Module):
    """`forward(x [n, T, D])` gives the token logits `[n, T, classes]` and, per layer, the
    router probabilities `[n T, E]` and the dispatched experts `[n T, k]`."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        width = config["width"]
        self.embed = nn.Linear(config["dim"], width)
        self.position = nn.Parameter(0.1 * torch.randn(config["length"], width))
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config["layers"]))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, config["classes"])

    def forward(self, x: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        h = self.embed(x) + self.position
        probs, index = [], []
        for block in self.blocks:
            h, p, i = block(h)
            probs.append(p)
            index.append(i)
        return self.head(self.norm(h)), probs, index


def topk_run(config: Mapping[str, Any], seed: int, arm: str) -> dict[str, Any]:
    """Train the transformer of `config` under `arm` (`trained` or `frozen`, see `ARMS`) from
    `seed`: its held-out specialisation (`purity`), token accuracy, smallest expert load
    (times E) and the router's largest identity residual (`router_residual`, inf when the
    tracer found no router)."""
    if arm not in ARMS:
        raise ValueError(f"arm: expected one of {ARMS}, got {arm!r}")
    experts, batch, steps = config["experts"], config["batch"], config["steps"]
    x, y, c_train = sequence_task(config, config["n_train"], seed)
    x_test, y_test, c_test = sequence_task(config, config["n_test"], seed + 10**6)
    torch.manual_seed(seed)
    model = MoETransformer(config)
    if arm == "frozen":
        for block in model.blocks:
            block.moe.router.requires_grad_(False)
            block.moe.router.register_forward_pre_hook(lambda _, args: (args[0].detach(),))
    plant: dict[str, Tensor] = {}
    if arm == "planted":
        for block in model.blocks:
            block.moe.router.register_forward_hook(
                lambda _, args, out: out + config["planted_bias"] * plant["bonus"]
            )
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config["lr"])
    g = torch.Generator().manual_seed(seed + 1)
    order = torch.randint(0, x.shape[0], (steps, batch), generator=g)

    def bonus(c: Tensor) -> Tensor:
        return F.one_hot(c.flatten() % experts, experts).to(torch.float32)

    def loss_of(t: int) -> Tensor:
        plant["bonus"] = bonus(c_train[order[t]])
        logits, probs, index = model(x[order[t]])
        loss = F.cross_entropy(logits.flatten(0, 1), y[order[t]].flatten())
        for p, i in zip(probs, index, strict=True):
            loss = loss + config["balance"] * experts * (loads(i, experts) * p.mean(0)).sum()
        return loss

    log = train_traced(model, opt, loss_of, steps, config["every"], lambda t: None)
    plant["bonus"] = bonus(c_test)
    with torch.no_grad():
        logits, _, index = model(x_test)
    first = index[0]
    clusters = c_test.flatten()
    return {
        "matched_purity": matched_purity(first[:, 0], clusters, experts, config["clusters"]),
        "purity": purity(first, clusters, config["clusters"]),
        "accuracy": float((logits.argmax(-1) == y_test).float().mean()),
        "min_share": float(loads(first, experts).min() * experts),
        "router_residual": log.residuals.get("router", math.inf),
        "site_types": log.site_types,
    }

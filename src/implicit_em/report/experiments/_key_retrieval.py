r"""Noisy-key retrieval: a task whose posterior over keys is known, and one attention layer on it.

**The task.** An episode draws $K$ keys $k_j$ uniform on the sphere of radius $\sqrt D$ in
$\mathbb R^D$, values $v_j \sim \mathcal N(0, I_{D_v})$, a latent key $z$ uniform over the keys
and a query $q = k_z + \sigma\varepsilon$, $\varepsilon \sim \mathcal N(0, I_D)$. By Bayes'
rule the posterior over keys is exactly

$$p(z = j \mid q, k) = \operatorname{softmax}_j\!\left(-\frac{\lVert q - k_j\rVert^2}{2\sigma^2}\right),$$

and, the keys sharing one norm, it equals $\operatorname{softmax}_j(q\cdot k_j/\sigma^2)$: a
bilinear score can express it. The target is the value $v_z$; since the values are drawn
independently of the keys, the squared error $\lVert\sum_j \alpha_j v_j - v_z\rVert^2$ has its
expected minimum, key by key, at $\alpha_j = p(z = j \mid q, k)$, whatever the weighting.

**The layer.** Scores $s_j = (W_q q)\cdot(W_k k_j) + b$ with learned $D\times D$ maps and a
scalar bias, and the output $\sum_j \alpha_j v_j$ with weights from one of `WEIGHTINGS`:

* `softmax`: $\alpha = \operatorname{softmax}(s)$, exponentiate and normalize;
* `sigmoid`: $\alpha_j = \sigma(s_j)$, each key on its own, unnormalized;
* `relu`: $\alpha_j = \max(s_j, 0) / \sum_k \max(s_k, 0)$, normalized but not exponential.

The rivals differ from softmax only in that step: same maps, data, loss and budget.

**The reading.** On held-out episodes, the total variation $\tfrac12\sum_j|\hat\alpha_j - p_j|$
and $\mathrm{KL}(p\,\Vert\,\hat\alpha)$ between the posterior and the weights read as a
distribution ($\hat\alpha = \alpha/\sum_k\alpha_k$: for the sigmoid this normalizes what the
layer does not; $\hat\alpha$ is floored at `FLOOR` for the KL, ReLU weights being exactly zero
on some keys), and the retrieval accuracy: the share of episodes whose largest weight is on $z$.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "FLOOR",
    "WEIGHTINGS",
    "Episodes",
    "RetrievalAttention",
    "Task",
    "draw",
    "held_out",
    "posterior",
    "read",
    "train",
    "weigh",
]

WEIGHTINGS = ("softmax", "sigmoid", "relu")
FLOOR = 1e-6
"""The smallest normalized weight the KL reading takes (a ReLU weight can be exactly zero)."""

TEST_STREAM = 7919
"""Held-out episodes come from generator seed `seed * TEST_STREAM + 1`, training from `seed`."""


@dataclass(frozen=True)
class Task:
    """Noisy-key retrieval: `keys` keys in dimension `dim`, values in `value_dim`, query noise
    `noise` ($\\sigma$)."""

    keys: int
    dim: int
    value_dim: int
    noise: float

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Task:
        return cls(
            int(config["keys"]),
            int(config["dim"]),
            int(config["value_dim"]),
            float(config["noise"]),
        )


@dataclass(frozen=True)
class Episodes:
    """`n` episodes: keys `[n, K, D]`, values `[n, K, Dv]`, latent keys `z [n]`, queries `[n, D]`."""

    keys: Tensor
    values: Tensor
    z: Tensor
    queries: Tensor


def draw(task: Task, n: int, generator: torch.Generator) -> Episodes:
    """`n` episodes of `task` (keys on the sphere of radius $\\sqrt D$)."""
    keys = torch.randn(n, task.keys, task.dim, generator=generator)
    keys = keys / keys.norm(dim=-1, keepdim=True) * task.dim**0.5
    values = torch.randn(n, task.keys, task.value_dim, generator=generator)
    z = torch.randint(task.keys, (n,), generator=generator)
    noise = torch.randn(n, task.dim, generator=generator) * task.noise
    return Episodes(keys, values, z, keys[torch.arange(n), z] + noise)


def posterior(queries: Tensor, keys: Tensor, noise: float) -> Tensor:
    """$p(z = j \\mid q, k) = \\operatorname{softmax}_j(-\\lVert q - k_j\\rVert^2 / 2\\sigma^2)$,
    `[n, K]`, for queries `[n, D]` and keys `[n, K, D]`."""
    distance = (queries[:, None, :] - keys).pow(2).sum(-1)
    return torch.softmax(-distance / (2 * noise**2), dim=-1)


def weigh(scores: Tensor, weighting: str) -> Tensor:
    """The weights of scores `[n, K]` under `weighting` (one of `WEIGHTINGS`)."""
    if weighting == "softmax":
        return torch.softmax(scores, dim=-1)
    if weighting == "sigmoid":
        return torch.sigmoid(scores)
    if weighting == "relu":
        positive = torch.relu(scores)
        return positive / positive.sum(-1, keepdim=True).clamp_min(1e-12)
    raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")


class RetrievalAttention(nn.Module):
    """One attention layer: scores $(W_q q)\\cdot(W_k k_j) + b$, weights by `weighting`,
    output $\\sum_j \\alpha_j v_j$."""

    def __init__(self, dim: int, weighting: str) -> None:
        super().__init__()
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        self.weighting = weighting
        self.query = nn.Linear(dim, dim, bias=False)
        self.key = nn.Linear(dim, dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(()))

    def weights(self, queries: Tensor, keys: Tensor) -> Tensor:
        """$\\alpha$, `[n, K]`."""
        scores = torch.einsum("nd,nkd->nk", self.query(queries), self.key(keys)) + self.bias
        return weigh(scores, self.weighting)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        return torch.einsum("nk,nkv->nv", self.weights(queries, keys), values)


def train(
    task: Task, weighting: str, seed: int, steps: int, batch: int, lr: float
) -> RetrievalAttention:
    """A `RetrievalAttention` trained by Adam (rate `lr`, cosine decay to zero) on `steps`
    fresh batches of `batch` episodes, squared error to $v_z$; initialization and data from
    `seed`."""
    torch.manual_seed(seed)
    model = RetrievalAttention(task.dim, weighting)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    for _ in range(steps):
        e = draw(task, batch, generator)
        target = e.values[torch.arange(batch), e.z]
        loss = (model(e.queries, e.keys, e.values) - target).pow(2).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    return model


def read(weights: Tensor, episodes: Episodes, task: Task) -> dict[str, float]:
    """Mean total variation and KL(posterior ‖ normalized weights) over `episodes`, and the
    retrieval accuracy of `weights` `[n, K]` (its largest weight on $z$)."""
    p = posterior(episodes.queries, episodes.keys, task.noise)
    total = weights.sum(-1, keepdim=True)
    normalized = torch.where(total > 0, weights / total.clamp_min(1e-30), 1.0 / task.keys)
    floored = normalized.clamp_min(FLOOR)
    floored = floored / floored.sum(-1, keepdim=True)
    kl = (p * (p.clamp_min(1e-30).log() - floored.log())).sum(-1)
    return {
        "tv": float(0.5 * (normalized - p).abs().sum(-1).mean()),
        "kl": float(kl.mean()),
        "accuracy": float((weights.argmax(-1) == episodes.z).double().mean()),
    }


def held_out(task: Task, seed: int, n: int) -> Episodes:
    """The `n` held-out episodes of `seed` (a stream training never draws)."""
    return draw(task, n, torch.Generator().manual_seed(seed * TEST_STREAM + 1))

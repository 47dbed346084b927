r"""One attention head, nothing else, trained by full-batch plain SGD (claim C12's small arms).

The model has no embedding, residual path, MLP, norm or bias: for inputs $x \in
\mathbb{R}^{B \times T \times d_x}$,

$$
s_{tj} = \frac{(x_t W_Q)\cdot(x_j W_K)}{\sqrt{d_k}}\ (j \le t), \qquad
\alpha_{tj} = \operatorname{softmax}_j(s_{tj}), \qquad
z_t = \Bigl(\sum_{j \le t} \alpha_{tj}\, x_j W_V\Bigr) W_O \in \mathbb{R}^{C},
$$

with $W_Q, W_K \in \mathbb{R}^{d_x \times d_k}$, $W_V \in \mathbb{R}^{d_x \times d_v}$,
$W_O \in \mathbb{R}^{d_v \times C}$, each drawn $\mathcal{N}(0, 0.1^2)$ in that order from the
run's seed. With $d_x = 20$, $d_k = 10$, $d_v = 15$, $C = 8$ it has 820 parameters. The only
way a position reads anything, its own input included, is through $\alpha$.

Training is plain gradient descent on the mean cross-entropy of the whole training set
(`train`): each part $P$ (`PARTS`: routing = $W_Q, W_K$; values = $W_V$; readout = $W_O$)
moves by

$$
\theta_P \leftarrow \theta_P - \eta\, m_P\, \nabla_{\theta_P} L,
$$

no momentum, no schedule, no decay, so a rate multiplier $m_P = 10$ is a step ten times as
long, and a part is frozen from step $t_f$ on by $m_P = 0$. Plain SGD has no state besides the
weights, so a branch from step $t$ is the weights at $t$ (`Run.states`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["PARTS", "OneHead", "Run", "attention_summary", "one_head", "train"]

PARTS = {"routing": ("W_Q", "W_K"), "values": ("W_V",), "readout": ("W_O",)}
"""The parts of the head, by the names of their weights."""
_ORDER = ("W_Q", "W_K", "W_V", "W_O")


def one_head(
    x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor
) -> tuple[Tensor, Tensor]:
    """The head's logits `[B, T, C]` and causal attention `[B, T, T]` (see the module)."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-1, -2) / math.sqrt(w_q.shape[-1])
    t = x.shape[-2]
    future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
    alpha = torch.softmax(scores.masked_fill(future, -math.inf), dim=-1)
    return alpha @ v @ w_o, alpha


class OneHead(nn.Module):
    """The weights of `one_head`, drawn $\\mathcal{N}(0, 0.1^2)$ from `seed` in the order
    $W_Q, W_K, W_V, W_O$."""

    def __init__(self, d_x: int, d_k: int, d_v: int, n_classes: int, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        shapes = {"W_Q": (d_x, d_k), "W_K": (d_x, d_k), "W_V": (d_x, d_v), "W_O": (d_v, n_classes)}
        for name in _ORDER:
            self.register_parameter(
                name, nn.Parameter(torch.randn(shapes[name], generator=gen) * 0.1)
            )

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return one_head(x.to(self.W_Q.dtype), self.W_Q, self.W_K, self.W_V, self.W_O)


@dataclass
class Run:
    """What `train` records: the training loss before every step (nats; `loss[s]` after $s$
    steps), `evaluations` (step → what `evaluate` returned), the weights at the steps asked
    for (`states`) and at every `snapshot_every` steps (`snapshots`, step → weights)."""

    loss: list[float] = field(default_factory=list)
    evaluations: dict[int, dict[str, float]] = field(default_factory=dict)
    states: dict[int, dict[str, Tensor]] = field(default_factory=dict)
    snapshots: dict[int, dict[str, Tensor]] = field(default_factory=dict)


def _weights(model: OneHead) -> dict[str, Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def train(
    model: OneHead,
    x: Tensor,
    y: Tensor,
    steps: int,
    lr: float,
    mults: Mapping[str, float] | None = None,
    *,
    start: int = 0,
    freeze: str = "",
    evaluate: Callable[[OneHead], dict[str, float]] | None = None,
    eval_every: int = 0,
    states_at: Sequence[int] = (),
    snapshot_every: int = 0,
) -> Run:
    """Full-batch plain SGD on `x` `[B, T, d_x]`, targets `y` `[B, T]`, from step `start` to
    `steps` (see the module): part $P$ at rate `lr * mults[P]` (1 when absent), `freeze` (a
    part name, or "") at rate 0 throughout. `evaluate` runs at `start`, every `eval_every`
    steps and at the end; the weights are kept at `states_at` and every `snapshot_every`
    steps (and at the end)."""
    if freeze and freeze not in PARTS:
        raise ValueError(f"freeze must be one of {tuple(PARTS)} or '', got {freeze!r}")
    rate = {
        name: 0.0 if part == freeze else lr * (mults or {}).get(part, 1.0)
        for part, names in PARTS.items()
        for name in names
    }
    params = dict(model.named_parameters())
    run = Run()
    for step in range(start, steps + 1):
        if evaluate is not None and (step == steps or (step - start) % max(eval_every, 1) == 0):
            with torch.no_grad():
                run.evaluations[step] = evaluate(model)
        if step in states_at:
            run.states[step] = _weights(model)
        if snapshot_every and (step % snapshot_every == 0 or step == steps):
            run.snapshots[step] = _weights(model)
        if step == steps:
            break
        logits, _ = model(x)
        loss = F.cross_entropy(logits.flatten(0, -2), y.flatten(), ignore_index=-100)
        grads = torch.autograd.grad(loss, list(params.values()))
        run.loss.append(float(loss.detach()))
        with torch.no_grad():
            for (name, p), g in zip(params.items(), grads, strict=True):
                p.add_(g, alpha=-rate[name])
    return run


def attention_summary(model: OneHead, x: Tensor) -> dict[str, float]:
    """On inputs `x`: the mean entropy of the attention rows with at least two keys (bits)."""
    _, alpha = model(x)
    rows = alpha[..., 1:, :]
    entropy = -(rows * rows.clamp_min(1e-300).log2()).sum(-1)
    return {"attention_entropy_bits": float(entropy.mean())}

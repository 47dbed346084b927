r"""The data of the one-head arms (`one_head`): the reference's sticky chain and a lag task.

**Sticky chain** (`sticky_chain`, the reference's two-timescale data). Over $n$ symbols with
stickiness $s$, the transition matrix is

$$
P_{ij} = (1 - s)\,\frac{w_{ij}}{\sum_k w_{ik}} + s\,[i = j], \qquad
w_{ii} = s,\quad w_{ij} = \frac{1}{\delta(i,j)}\ (j \ne i), \qquad
\delta(i, j) = \min(|i - j|,\ n - |i - j|),
$$

the off-diagonals inversely proportional to the circular distance (the self-transition is
$s + (1-s)s/\sum_k w_{ik}$, 0.350 for $n = 8$, $s = 0.3$, as the reference computes it). One chain $y_0, \dots,
y_{T-1}$ is drawn (first symbol uniform), and the input at position $t \ge 1$ is a noisy
embedding of the previous symbol, $x_t = \mu_{y_{t-1}} + \varepsilon_t$, $\varepsilon_t \sim
\mathcal{N}(0, I)$, with fixed means $\mu \sim \mathcal{N}(0, I)$ drawn from seed 0; the target
is $y_t$. The whole chain is one sequence of $T - 1$ positions. Its floor is $H_\text{min} =
\frac1n \sum_i H(P_{i\cdot})$ (nats, the mean row entropy). The random draws come in the order
the reference's generator makes them (the first symbol, the chain, the noise), from a generator
seeded with the run's seed.

**Lag task** (`lag_task`, a target that needs attention). Sequences $y_0, \dots, y_L$ with
$y_0, y_1$ uniform and $y_t \sim P_{y_{t-2}\cdot}$ for $t \ge 2$ (two interleaved chains, $P$
the sticky matrix above). The input at position $t = 1, \dots, L$ carries the previous symbol
and the position, $x_t = e_{y_{t-1}} \oplus e_t$ (one-hot, no noise), and the target is $y_t$.
The answer depends on $y_{t-2}$, which only the token at $t-1$ carries: the head must route.
Positions $t \ge 2$ are trained and judged ($y_1$ is independent of everything the head can
see, so position 1 is left out of the loss). The exact posterior there is $p(y_t \mid x_{\le
t}) = P_{y_{t-2}\cdot}$, and a model $q$ is scored by its held-out KL in bits,
$\frac{1}{B(L-1)}\sum_{b,\,t \ge 2} \operatorname{KL}(p_{bt} \,\|\, q_{bt}) / \ln 2$, beside the
floor, the uniform prediction's KL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F

__all__ = ["Data", "kl_bits", "lag_task", "sticky_chain", "transition_matrix"]


@dataclass(frozen=True)
class Data:
    """Inputs `x` `[B, T, d_x]`, targets `y` `[B, T]` (long; -100 at positions left out of the
    loss), the exact posterior `p` `[B, T - judged, C]` of the positions from `judged` on (None
    where the arm does not read it)."""

    x: Tensor
    y: Tensor
    p: Tensor | None = None
    judged: int = 0

    def kl_bits(self, logits: Tensor) -> float:
        """The held-out KL of `logits` `[B, T, C]` at the judged positions (`kl_bits`)."""
        if self.p is None:
            raise ValueError("this data has no exact posterior")
        return kl_bits(self.p, logits[:, self.judged :])


def transition_matrix(n: int, self_prob: float, dtype: torch.dtype = torch.float64) -> Tensor:
    """$P$ of the module (stickiness `self_prob`, off-diagonals ∝ 1/circular distance)."""
    i = torch.arange(n)
    gap = (i[:, None] - i[None, :]).abs()
    dist = torch.minimum(gap, n - gap).to(dtype)
    eye = torch.eye(n, dtype=dtype)
    w = torch.where(dist > 0, 1.0 / dist.clamp_min(1.0), self_prob * eye)
    p = (1.0 - self_prob) * w / w.sum(1, keepdim=True) + self_prob * eye
    return p / p.sum(1, keepdim=True)


def sticky_chain(
    seed: int, length: int, n_symbols: int, d_embed: int, self_prob: float
) -> tuple[Data, float]:
    """One chain of `length` symbols as one sequence (see the module), and $H_\\text{min}$
    (nats)."""
    p = transition_matrix(n_symbols, self_prob, torch.float32)
    mu = torch.randn(n_symbols, d_embed, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(seed)
    chain = [int(torch.randint(n_symbols, (1,), generator=gen))]
    for _ in range(length - 1):
        chain.append(int(torch.multinomial(p[chain[-1]], 1, generator=gen)))
    y = torch.tensor(chain)
    x = mu[y[:-1]] + torch.randn(length - 1, d_embed, generator=gen)
    h_min = float(-(p * (p + 1e-10).log()).sum(1).mean())
    return Data(x[None], y[None, 1:]), h_min


def lag_task(seed: int, n_sequences: int, length: int, n_symbols: int, self_prob: float) -> Data:
    """`n_sequences` sequences of the lag task with `length` positions (see the module), in
    float64, with their exact posteriors."""
    p = transition_matrix(n_symbols, self_prob)
    gen = torch.Generator().manual_seed(seed)
    y = torch.empty(n_sequences, length + 1, dtype=torch.long)
    y[:, :2] = torch.randint(n_symbols, (n_sequences, 2), generator=gen)
    for t in range(2, length + 1):
        y[:, t] = torch.multinomial(p[y[:, t - 2]], 1, generator=gen).squeeze(-1)
    position = torch.eye(length, dtype=torch.float64).expand(n_sequences, length, length)
    x = torch.cat([F.one_hot(y[:, :-1], n_symbols).double(), position], dim=-1)
    targets = y[:, 1:].clone()
    targets[:, 0] = -100
    return Data(x, targets, p[y[:, : length - 1]], judged=1)


def kl_bits(p: Tensor, logits: Tensor) -> float:
    """Mean over positions of $\\operatorname{KL}(p \\,\\|\\, \\operatorname{softmax}(z))$ in
    bits."""
    log_q = torch.log_softmax(logits.double(), dim=-1)
    log_p = p.clamp_min(1e-300).log()
    return float((p * (log_p - log_q)).sum(-1).mean() / math.log(2))

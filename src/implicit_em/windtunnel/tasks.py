r"""Wind-tunnel tasks: samplers of fresh sequences with the exact posterior at every target.

Every call to `Task.sample` draws new latent structure (a bijection, a pair of HMM
matrices, a coin bias), so a model cannot memorize answers: it can only lower its loss by
computing the posterior in context. A `Batch` carries

* `tokens[B, T]` (int64): the input sequence;
* `mask[B, T]` (bool): the supervised positions (the model's prediction at position `t` is
  read after it has seen `tokens[:, : t + 1]`);
* `target[B, T]` (int64): the answer drawn from the generative process at each supervised
  position (0 elsewhere), the hard label of ordinary next-token training;
* `posterior[B, T, K]` (float64): the exact posterior over the `K` answers at each supervised
  position (uniform elsewhere), the soft target and the reference of every metric.

The target is always a draw from the posterior: `target ~ posterior` given the context, so the
minimizer of the expected cross-entropy on `target` is `posterior` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from implicit_em.windtunnel.batch import Batch, Task, uniform_simplex
from implicit_em.windtunnel.hmm import HMMFilter, forward_filter

__all__ = [
    "Batch",
    "Bijection",
    "DiceCounting",
    "HMMFilter",
    "StickyMarkov",
    "Task",
    "forward_filter",
    "make_task",
]


def _random_permutations(batch_size: int, n: int, generator: torch.Generator) -> Tensor:
    """`[B, n]` independent uniformly random permutations of `0..n-1`."""
    return torch.rand(batch_size, n, generator=generator).argsort(dim=-1)


def _interleave(a: Tensor, b: Tensor) -> Tensor:
    """`[a_1, b_1, a_2, b_2, ...]` along the last axis."""
    return torch.stack([a, b], dim=-1).flatten(-2)


@dataclass(frozen=True)
class Bijection:
    r"""Bijection elimination: `L` key/value pairs of a fresh bijection on `V` symbols.

    Each sequence draws a fresh bijection $\pi$ of `0..V-1` and shows `L = n_pairs`
    pairs $(x_k, \pi(x_k))$: `tokens = [x_1, y_1, ..., x_L, y_L]` with keys as ids
    `0..V-1` and values as ids `V..2V-1` (separate tokens). The supervised positions are the
    keys $x_k$ (predict $y_k = \pi(x_k)$ next); the last value is never read.

    * Without replacement (default) the keys are distinct; the posterior at $x_k$ is uniform
        over the `V - k + 1` values not yet revealed,

        $$
        p(\pi(x_k) = y \mid \text{context}) = \frac{1[y \notin \{y_1..y_{k-1}\}]}{V-k+1},
        \qquad H_k = \log_2(V-k+1)\ \text{bits}.
        $$

    * With replacement the keys are i.i.d. uniform: a key seen before has its known value
        ($H_k = 0$); a new key's value is uniform over the $V - D_{k-1}$ values not yet
        revealed, $D_{k-1}$ the number of distinct keys among $x_1..x_{k-1}$.

    A model that cannot read the context (one that sees only $x_k$ and `k`) can do no
    better than the uniform prediction over `V` values; `context_free_bits` is its
    error, the same in entropy MAE and in KL: $\frac1L \sum_k E[\log_2 V - H_k]$.
    """

    n_symbols: int = 10
    n_pairs: int | None = None
    replacement: bool = False
    name: ClassVar[str] = "bijection"

    def __post_init__(self) -> None:
        if self.n_symbols < 2:
            raise ValueError(f"n_symbols (V) must be >= 2, got {self.n_symbols}")
        if self.n_pairs is not None and not 1 <= self.n_pairs <= self.n_symbols:
            raise ValueError(
                f"n_pairs (L) must be between 1 and n_symbols = {self.n_symbols}, "
                f"got {self.n_pairs}"
            )

    @property
    def length(self) -> int:
        """`L`, the number of pairs shown (`V` when `n_pairs` is not given)."""
        return self.n_symbols if self.n_pairs is None else self.n_pairs

    @property
    def vocab_size(self) -> int:
        return 2 * self.n_symbols

    @property
    def seq_len(self) -> int:
        return 2 * self.length

    @property
    def n_classes(self) -> int:
        return self.n_symbols

    @property
    def context_free_bits(self) -> float:
        r"""Error in bits (entropy MAE and KL alike) of the best context-free prediction.

        Without replacement $\log_2 V - \frac1L \sum_{k=1}^{L} \log_2(V-k+1)$; with
        replacement $\log_2 V - \frac1L \sum_k \sum_d P(D_{k-1}=d)\,\frac{V-d}{V}\log_2(V-d)$,
        the distinct-key count $D$ following its exact recursion. V = 20, L = 19: 1.107 bits
        without replacement and 1.849 with.
        """
        v, n = self.n_symbols, self.length
        if not self.replacement:
            mean_h = sum(math.log2(v - k) for k in range(n)) / n
            return math.log2(v) - mean_h
        distinct = [1.0] + [0.0] * v  # P(D = d) before the first key
        total = 0.0
        for _ in range(n):
            total += sum(p * (v - d) / v * math.log2(v - d) for d, p in enumerate(distinct) if p)
            step = [0.0] * (v + 1)
            for d, p in enumerate(distinct):
                if p:
                    step[d] += p * d / v
                    if d < v:
                        step[d + 1] += p * (v - d) / v
            distinct = step
        return math.log2(v) - total / n

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        v, n = self.n_symbols, self.length
        one_hot = torch.nn.functional.one_hot
        if self.replacement:
            x = torch.randint(0, v, (batch_size, n), generator=generator)
            pi = _random_permutations(batch_size, v, generator)
            y = pi.gather(1, x)
        else:
            x = _random_permutations(batch_size, v, generator)[:, :n]
            # pi(x_k) for a uniformly random bijection and distinct x_k: a random permutation.
            y = _random_permutations(batch_size, v, generator)[:, :n]
        tokens = _interleave(x, y + v)
        shown = one_hot(y, v)
        revealed = ((shown.cumsum(dim=1) - shown) > 0).double()  # values revealed before pair k
        unseen = 1.0 - revealed
        post_x = unseen / unseen.sum(dim=-1, keepdim=True)
        if self.replacement:
            keys = one_hot(x, v)
            seen_before = ((keys.cumsum(dim=1) - keys) * keys).sum(dim=-1) > 0
            post_x = torch.where(seen_before[..., None], shown.double(), post_x)
        uniform = torch.full_like(post_x, 1.0 / v)
        posterior = _interleave(post_x.transpose(1, 2), uniform.transpose(1, 2)).transpose(1, 2)
        mask = _interleave(
            torch.ones_like(x, dtype=torch.bool), torch.zeros_like(x, dtype=torch.bool)
        )
        target = _interleave(y, torch.zeros_like(y))
        return Batch(tokens, mask, target, posterior)


@dataclass(frozen=True)
class DiceCounting:
    r"""Dirichlet-categorical counting (a coin for `n_faces = 2`).

    Each sequence draws face probabilities $\theta \sim \text{Dirichlet}(1)$ and rolls
    $x_1, \dots, x_T$. `tokens = [BOS, x_1, ..., x_{T-1}]` (faces `0..K-1`, BOS `= K`)
    and position `t` predicts $x_{t+1}$ with the exact posterior predictive (Laplace's rule)

    $$
    p(x_{t+1} = j \mid x_{1:t}) = \frac{1 + n_j(t)}{K + t}.
    $$
    """

    n_faces: int = 2
    length: int = 16
    name: ClassVar[str] = "dice"

    def __post_init__(self) -> None:
        if self.n_faces < 2 or self.length < 1:
            raise ValueError("DiceCounting needs n_faces >= 2 and length >= 1")

    @property
    def vocab_size(self) -> int:
        return self.n_faces + 1

    @property
    def seq_len(self) -> int:
        return self.length

    @property
    def n_classes(self) -> int:
        return self.n_faces

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        k, t = self.n_faces, self.length
        theta = uniform_simplex((batch_size,), k, generator)
        rolls = torch.multinomial(theta, t, replacement=True, generator=generator)
        bos = torch.full((batch_size, 1), k, dtype=torch.int64)
        tokens = torch.cat([bos, rolls[:, :-1]], dim=1)
        seen = torch.nn.functional.one_hot(tokens, k + 1)[..., :k].cumsum(dim=1).double()
        steps = torch.arange(t, dtype=torch.float64)[None, :, None]
        posterior = (1.0 + seen) / (k + steps)
        mask = torch.ones(batch_size, t, dtype=torch.bool)
        return Batch(tokens, mask, rolls, posterior)


@dataclass(frozen=True)
class StickyMarkov:
    r"""A sticky Markov chain on `n_symbols` symbols: the two-timescale reference task.

    One transition matrix $P$ for the whole task (fixed by `matrix_seed`): each row keeps
    `stay` on its own symbol and spreads $1 - s$ (with $s$ = `stay`) over the others by a draw from the flat
    Dirichlet. Each sequence starts from a uniform symbol and follows the chain; the model reads
    $x_1..x_t$ and predicts $x_{t+1}$, whose exact posterior is the transition row of the last
    symbol, $p(x_{t+1} = j \mid x_{1..t}) = P_{x_t j}$ (the chain is Markov), at every position.
    """

    n_symbols: int = 8
    length: int = 16
    stay: float = 0.3
    matrix_seed: int = 0
    name: ClassVar[str] = "sticky"

    def __post_init__(self) -> None:
        if self.n_symbols < 2 or self.length < 1:
            raise ValueError("n_symbols must be >= 2 and length >= 1")
        if not 0.0 <= self.stay < 1.0:
            raise ValueError(f"stay must be in [0, 1), got {self.stay}")

    @property
    def vocab_size(self) -> int:
        return self.n_symbols

    @property
    def seq_len(self) -> int:
        return self.length

    @property
    def n_classes(self) -> int:
        return self.n_symbols

    def transitions(self) -> Tensor:
        """`P[n, n]` (float64): `stay` on the diagonal, the rest of each row on the others."""
        n = self.n_symbols
        fixed = torch.Generator().manual_seed(self.matrix_seed)
        spread = uniform_simplex((n,), n - 1, fixed)
        off = ~torch.eye(n, dtype=torch.bool)
        p = torch.diag(torch.full((n,), self.stay, dtype=torch.float64))
        p[off] = (1.0 - self.stay) * spread.reshape(-1)
        return p

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.transitions()
        x = torch.randint(0, self.n_symbols, (batch_size,), generator=generator)
        chain = [x]
        for _ in range(self.length):
            x = torch.multinomial(p[x], 1, generator=generator)[:, 0]
            chain.append(x)
        symbols = torch.stack(chain, dim=1)
        tokens, target = symbols[:, :-1], symbols[:, 1:]
        mask = torch.ones_like(tokens, dtype=torch.bool)
        return Batch(tokens, mask, target, p[tokens])


_TASKS: dict[str, type] = {
    "bijection": Bijection,
    "hmm": HMMFilter,
    "dice": DiceCounting,
    "sticky": StickyMarkov,
}


def make_task(name: str, **params: int | bool | float | None) -> Task:
    """The task called `name` (`bijection` | `hmm` | `dice` | `sticky`) with its size
    parameters."""
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; choose from {sorted(_TASKS)}")
    return _TASKS[name](**params)

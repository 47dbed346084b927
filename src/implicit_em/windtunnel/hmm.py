r"""The HMM filtering task: the model given in context, the exact filter as the posterior."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from implicit_em.windtunnel.batch import Batch, uniform_simplex

__all__ = ["HMMFilter", "forward_filter"]


def forward_filter(
    transition: Tensor, emission: Tensor, initial: Tensor, observations: Tensor
) -> Tensor:
    r"""Filtering posteriors $p(s_t \mid o_{1:t})$ of a batch of HMMs, in float64.

    $$
    \alpha_1 \propto \pi_0 \odot E_{\cdot, o_1}, \qquad
    \alpha_t \propto (\alpha_{t-1}^\top A) \odot E_{\cdot, o_t}.
    $$

    Parameters
    ----------
    transition : Tensor
        $A$, `[B, S, S]`, with `A[b, i, j]` $= p(s_{t+1}=j \mid s_t=i)$.
    emission : Tensor
        $E$, `[B, S, O]`, with `E[b, i, o]` $= p(o \mid s=i)$.
    initial : Tensor
        $\pi_0$, `[B, S]`.
    observations : Tensor
        $o$, `[B, T]` (int64, observations with positive probability).

    Returns
    -------
    Tensor
        $\alpha$, `[B, T, S]` (float64), each row a probability vector.
    """
    a, e, alpha = transition.double(), emission.double(), initial.double()
    idx = observations[:, None, :].expand(-1, e.shape[1], -1)
    likelihood = torch.gather(e, 2, idx).transpose(1, 2)
    out = []
    for t in range(observations.shape[1]):
        if t > 0:
            alpha = torch.einsum("bi,bij->bj", alpha, a)
        alpha = alpha * likelihood[:, t]
        alpha = alpha / alpha.sum(dim=-1, keepdim=True)
        out.append(alpha)
    return torch.stack(out, dim=1)


def _quantized_simplex(
    shape: tuple[int, ...], n: int, levels: int, generator: torch.Generator
) -> Tensor:
    r"""Counts $c \sim \text{Multinomial}(Q, p)$, $p \sim \text{Dirichlet}(1)$.

    Returns int64 `c[*shape, n]` with rows summing to `levels` $= Q$: the probability
    row $c / Q$ is a Dirichlet draw quantized so that each entry is one of `Q + 1` tokens.
    """
    p = uniform_simplex(shape, n, generator).reshape(-1, n)
    draws = torch.multinomial(p, levels, replacement=True, generator=generator)
    counts = torch.nn.functional.one_hot(draws, n).sum(dim=1)
    return counts.reshape(*shape, n)


def _floored_grid(
    shape: tuple[int, ...], n: int, levels: int, floor: int, generator: torch.Generator
) -> Tensor:
    r"""Counts of a Dirichlet(1) row floored, renormalized and rounded to a grid.

    $p \sim \text{Dirichlet}(1)$, $p \leftarrow \max(p, f/Q)$ renormalized, then
    $c = \max(f, \operatorname{round}(Q p))$ with the largest entry absorbing the rounding so
    that each row sums to `levels` $= Q$. Every probability $c / Q$ is on the
    $1/Q$ grid and at least $f/Q$ (`floor` $= f$); Q = 100, f = 5 gives the
    0.01 grid with minimum 0.05.
    """
    p = uniform_simplex(shape, n, generator)
    p = p.clamp(min=floor / levels)
    p = p / p.sum(dim=-1, keepdim=True)
    counts = torch.round(p * levels).long().clamp(min=floor)
    largest = counts.argmax(dim=-1, keepdim=True)
    excess = levels - counts.sum(dim=-1, keepdim=True)
    counts = counts.scatter_add(-1, largest, excess)
    if bool((counts < floor).any()):
        raise ValueError(f"floor={floor} is too large for {n} entries on a grid of {levels}")
    return counts


def _categorical(p: Tensor, generator: torch.Generator) -> Tensor:
    """One draw per row of `p[B, K]`."""
    return torch.multinomial(p, 1, generator=generator).squeeze(-1)


@dataclass(frozen=True)
class HMMFilter:
    r"""HMM state tracking with the model given in context.

    Each sequence draws a transition matrix $A$ (`S x S`) and an emission matrix
    $E$ (`S x O`) whose rows are Dirichlet(1) draws put on the grid of multiples of
    $1/Q$ (`levels` = Q), a uniform initial state, hidden states $s_{1:T}$ and
    observations $o_{1:T}$. With `floor = 0` a row is a multinomial quantization
    ($Q$ draws from the Dirichlet row, so zeros occur); with `floor = f > 0` it is floored
    at $f/Q$, renormalized and rounded (`_floored_grid`): Q = 100, f = 5 is the
    reference protocol's 0.01 grid with minimum 0.05. The context spells out the model, then the observations:

    `tokens = [Q A_11, ..., Q A_SS, Q E_11, ..., Q E_SO, o_1, ..., o_T]` with matrix entries as
    ids `0..Q` and observations as ids `Q+1..Q+O`. The supervised positions are the
    observations; the exact posterior at $o_t$ is the filter $p(s_t \mid o_{1:t})$
    (`forward_filter`) and the sampled target is the true state $s_t$.

    With `markers` the sequence carries the reference protocol's structure tokens:
    `[TRANS] Q A_11 ... Q A_SS [EMIT] Q E_11 ... Q E_SO [SEP] [OBS] o_1 [OBS] o_2 ... [OBS] o_T`
    (S(S+O) + 3 + 2T tokens: 93 at S = O = 5, T = 20), the four markers as ids
    `Q+O+1..Q+O+4`; the supervised positions are the observation tokens, where the model has
    read $o_{1:t}$ and predicts the filter $p(s_t \mid o_{1:t})$ as without markers.
    """

    n_states: int = 5
    n_observations: int = 5
    length: int = 12
    levels: int = 10
    floor: int = 0
    markers: bool = False
    name: ClassVar[str] = "hmm"

    def __post_init__(self) -> None:
        if min(self.n_states, self.n_observations) < 2 or self.length < 1 or self.levels < 1:
            raise ValueError(
                "HMMFilter needs n_states >= 2, n_observations >= 2, length >= 1 and levels >= 1"
            )
        widest = max(self.n_states, self.n_observations)
        if self.floor < 0 or self.floor * widest > self.levels:
            raise ValueError(
                f"floor must be >= 0 with floor * max(n_states, n_observations) <= levels = "
                f"{self.levels}, got {self.floor}"
            )

    @property
    def context_len(self) -> int:
        """Number of tokens that spell out the matrices (with their three markers)."""
        return self.n_states * (self.n_states + self.n_observations) + 3 * self.markers

    @property
    def vocab_size(self) -> int:
        return self.levels + 1 + self.n_observations + 4 * self.markers

    @property
    def seq_len(self) -> int:
        return self.context_len + self.length * (1 + self.markers)

    @property
    def observed_at(self) -> Tensor:
        """The positions of the observation tokens (the supervised positions), `[T]`."""
        step = 1 + self.markers
        return self.context_len + self.markers + step * torch.arange(self.length)

    def _spell(self, a_counts: Tensor, e_counts: Tensor, obs: Tensor) -> Tensor:
        """The token sequences of the matrices' counts and the observations (see the class)."""
        q, batch = self.levels, obs.shape[0]
        observed = obs + q + 1
        if not self.markers:
            return torch.cat([a_counts.flatten(1), e_counts.flatten(1), observed], dim=1)
        trans, emit, sep, mark = (q + self.n_observations + 1 + i for i in range(4))

        def marker(token: int, width: int = 1) -> Tensor:
            return torch.full((batch, width), token, dtype=torch.int64)

        pairs = torch.stack([marker(mark, self.length), observed], dim=2).flatten(1)
        parts = [marker(trans), a_counts.flatten(1), marker(emit), e_counts.flatten(1)]
        return torch.cat([*parts, marker(sep), pairs], dim=1)

    @property
    def n_classes(self) -> int:
        return self.n_states

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        s, o, q = self.n_states, self.n_observations, self.levels
        if self.floor:
            a_counts = _floored_grid((batch_size, s), s, q, self.floor, generator)
            e_counts = _floored_grid((batch_size, s), o, q, self.floor, generator)
        else:
            a_counts = _quantized_simplex((batch_size, s), s, q, generator)
            e_counts = _quantized_simplex((batch_size, s), o, q, generator)
        a, e = a_counts.double() / q, e_counts.double() / q
        initial = torch.full((batch_size, s), 1.0 / s, dtype=torch.float64)
        states, obs = [], []
        state_p = initial
        for _ in range(self.length):
            state = _categorical(state_p, generator)
            states.append(state)
            obs.append(_categorical(e[torch.arange(batch_size), state], generator))
            state_p = a[torch.arange(batch_size), state]
        states_t, obs_t = torch.stack(states, dim=1), torch.stack(obs, dim=1)
        filtered = forward_filter(a, e, initial, obs_t)
        at = self.observed_at
        tokens = self._spell(a_counts, e_counts, obs_t)
        mask = torch.zeros(batch_size, self.seq_len, dtype=torch.bool)
        mask[:, at] = True
        target = torch.zeros(batch_size, self.seq_len, dtype=torch.int64)
        target[:, at] = states_t
        posterior = torch.full((batch_size, self.seq_len, s), 1.0 / s, dtype=torch.float64)
        posterior[:, at] = filtered
        return Batch(tokens, mask, target, posterior)

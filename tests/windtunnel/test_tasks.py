"""Each task's exact posterior against brute-force enumeration on small sizes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from implicit_em.windtunnel.tasks import (
    Bijection,
    DiceCounting,
    HMMFilter,
    forward_filter,
    make_task,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    "task",
    [
        Bijection(4),
        Bijection(5, n_pairs=3),
        Bijection(4, n_pairs=4, replacement=True),
        HMMFilter(3, 2, 5, 4),
        HMMFilter(5, 5, 6, levels=100, floor=5),
        HMMFilter(3, 2, 4, levels=100, floor=5, markers=True),
        DiceCounting(3, 6),
    ],
)
def test_batch_shapes_and_posteriors_are_distributions(task) -> None:
    b = task.sample(7, _gen(0))
    assert b.tokens.shape == b.mask.shape == b.target.shape == (7, task.seq_len)
    assert b.posterior.shape == (7, task.seq_len, task.n_classes)
    assert b.tokens.dtype == torch.int64 and b.posterior.dtype == torch.float64
    assert int(b.tokens.min()) >= 0 and int(b.tokens.max()) < task.vocab_size
    assert torch.allclose(b.posterior.sum(-1), torch.ones(7, task.seq_len, dtype=torch.float64))
    assert bool((b.posterior >= 0).all())
    # The drawn answer always has positive posterior probability.
    p_target = b.posterior.gather(-1, b.target[..., None]).squeeze(-1)
    assert bool((p_target[b.mask] > 0).all())


def test_sampling_is_reproducible_and_fresh() -> None:
    task = HMMFilter(3, 3, 4, 5)
    a, b = task.sample(4, _gen(1)), task.sample(4, _gen(1))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.posterior, b.posterior)
    g = _gen(1)
    first, second = task.sample(4, g), task.sample(4, g)
    assert not torch.equal(first.tokens, second.tokens)


def _bijection_brute_force(tokens: list[int], v: int) -> list[list[float]]:
    """Posterior of pi(x_k) at each input position by enumerating all V! bijections."""
    pairs = [(tokens[2 * k], tokens[2 * k + 1] - v) for k in range(v)]
    out = []
    for k in range(v):
        counts = np.zeros(v)
        for pi in itertools.permutations(range(v)):
            if all(pi[x] == y for x, y in pairs[:k]):
                counts[pi[pairs[k][0]]] += 1
        out.append(list(counts / counts.sum()))
    return out


@settings(max_examples=15, deadline=None)
@given(v=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_bijection_posterior_matches_enumeration(v: int, seed: int) -> None:
    task = Bijection(v)
    b = task.sample(2, _gen(seed))
    for i in range(2):
        exact = b.posterior[i, 0::2].numpy()
        np.testing.assert_allclose(
            exact, _bijection_brute_force(b.tokens[i].tolist(), v), atol=1e-12
        )
    entropy = -(b.posterior[:, 0::2] * b.posterior[:, 0::2].clamp_min(1e-300).log2()).sum(-1)
    expected = torch.log2(torch.arange(v, 0, -1, dtype=torch.float64))
    torch.testing.assert_close(entropy, expected.expand(2, v))
    assert b.mask[:, 0::2].all() and not b.mask[:, 1::2].any()


def _pairs_brute_force(tokens: list[int], v: int) -> list[list[float]]:
    """Posterior of pi(x_k) at each key by enumerating all V! bijections consistent with the
    pairs shown before it (keys may repeat: their law does not depend on pi)."""
    pairs = [(tokens[2 * k], tokens[2 * k + 1] - v) for k in range(len(tokens) // 2)]
    out = []
    for k, (key, _) in enumerate(pairs):
        counts = np.zeros(v)
        for pi in itertools.permutations(range(v)):
            if all(pi[x] == y for x, y in pairs[:k]):
                counts[pi[key]] += 1
        out.append(list(counts / counts.sum()))
    return out


@settings(max_examples=25, deadline=None)
@given(
    v=st.integers(2, 5),
    data=st.data(),
    replacement=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_bijection_with_fewer_pairs_and_replacement_matches_enumeration(
    v: int, data: st.DataObject, replacement: bool, seed: int
) -> None:
    n = data.draw(st.integers(1, v))
    task = Bijection(v, n_pairs=n, replacement=replacement)
    assert (task.seq_len, task.vocab_size, task.n_classes) == (2 * n, 2 * v, v)
    b = task.sample(3, _gen(seed))
    keys, values = b.tokens[:, 0::2], b.tokens[:, 1::2]
    assert int(keys.max()) < v <= int(values.min())  # separate key and value tokens
    if not replacement:
        assert all(len(set(row)) == n for row in keys.tolist())
    for i in range(3):
        np.testing.assert_allclose(
            b.posterior[i, 0::2].numpy(), _pairs_brute_force(b.tokens[i].tolist(), v), atol=1e-12
        )
    assert torch.equal(b.target[:, 0::2], values - v)


def test_with_replacement_a_seen_key_has_a_known_value() -> None:
    b = Bijection(3, n_pairs=3, replacement=True).sample(200, _gen(5))
    keys = b.tokens[:, 0::2]
    repeated = keys[:, 1] == keys[:, 0]
    assert 0 < int(repeated.sum()) < 200
    assert torch.equal(b.posterior[repeated, 2].argmax(-1), b.tokens[repeated, 1] - 3) and bool(
        (b.posterior[repeated, 2].max(-1).values == 1).all()
    )


def _context_free_by_enumeration(v: int, n: int, replacement: bool) -> float:
    """Mean of log2 V - H(posterior) over every key sequence, weighted by its probability (the
    posterior's entropy depends on the keys only, not on pi)."""
    total, weight = 0.0, 0.0
    sequences = (
        itertools.product(range(v), repeat=n)
        if replacement
        else itertools.permutations(range(v), n)
    )
    for keys in sequences:
        tokens = [
            t for k in keys for t in (k, v + k)
        ]  # pi = identity: entropies do not depend on it
        post = np.array(_pairs_brute_force(tokens, v))
        h = -(post * np.log2(np.where(post > 0, post, 1.0))).sum(-1)
        total += float(np.mean(math.log2(v) - h))
        weight += 1.0
    return total / weight


@pytest.mark.parametrize(("v", "n", "replacement"), [(4, 3, False), (4, 4, True), (5, 3, True)])
def test_context_free_floor_matches_enumeration(v: int, n: int, replacement: bool) -> None:
    task = Bijection(v, n_pairs=n, replacement=replacement)
    expected = _context_free_by_enumeration(v, n, replacement)
    assert task.context_free_bits == pytest.approx(expected, abs=1e-12)


def test_reference_floors_are_the_published_ones() -> None:
    assert Bijection(20, n_pairs=19).context_free_bits == pytest.approx(1.107, abs=5e-4)
    assert Bijection(20, n_pairs=19, replacement=True).context_free_bits == pytest.approx(
        1.849, abs=5e-4
    )
    # Sampled entropies agree with the closed form.
    b = Bijection(20, n_pairs=19, replacement=True).sample(4000, _gen(0))
    p = b.posterior[:, 0::2]
    h = -(p * torch.where(p > 0, p.log2(), torch.zeros_like(p))).sum(-1)
    assert math.log2(20) - float(h.mean()) == pytest.approx(1.849, abs=0.01)


def _hmm_brute_force(a: np.ndarray, e: np.ndarray, obs: list[int]) -> np.ndarray:
    """p(s_t | o_1:t) by summing the joint over all S^t state paths."""
    s = a.shape[0]
    out = []
    for t in range(1, len(obs) + 1):
        post = np.zeros(s)
        for path in itertools.product(range(s), repeat=t):
            p = 1.0 / s * e[path[0], obs[0]]
            for j in range(1, t):
                p *= a[path[j - 1], path[j]] * e[path[j], obs[j]]
            post[path[-1]] += p
        out.append(post / post.sum())
    return np.array(out)


@settings(max_examples=10, deadline=None)
@given(
    s=st.integers(2, 3), o=st.integers(2, 3), length=st.integers(1, 5), seed=st.integers(0, 10_000)
)
def test_hmm_filter_matches_enumeration(s: int, o: int, length: int, seed: int) -> None:
    task = HMMFilter(s, o, length, levels=6)
    b = task.sample(2, _gen(seed))
    ctx = task.context_len
    for i in range(2):
        toks = b.tokens[i]
        a = toks[: s * s].reshape(s, s).double().numpy() / task.levels
        e = toks[s * s : ctx].reshape(s, o).double().numpy() / task.levels
        np.testing.assert_allclose(a.sum(1), 1.0)
        np.testing.assert_allclose(e.sum(1), 1.0)
        obs = (toks[ctx:] - task.levels - 1).tolist()
        np.testing.assert_allclose(
            b.posterior[i, ctx:].numpy(), _hmm_brute_force(a, e, obs), atol=1e-12
        )
    assert b.mask[:, ctx:].all() and not b.mask[:, :ctx].any()


@settings(max_examples=10, deadline=None)
@given(s=st.integers(2, 3), length=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_hmm_reference_grid_matches_enumeration(s: int, length: int, seed: int) -> None:
    task = HMMFilter(s, 2, length, levels=100, floor=5)
    b = task.sample(2, _gen(seed))
    ctx = task.context_len
    for i in range(2):
        toks = b.tokens[i]
        a = toks[: s * s].reshape(s, s).double().numpy() / 100
        e = toks[s * s : ctx].reshape(s, 2).double().numpy() / 100
        obs = (toks[ctx:] - task.levels - 1).tolist()
        np.testing.assert_allclose(
            b.posterior[i, ctx:].numpy(), _hmm_brute_force(a, e, obs), atol=1e-12
        )


def test_hmm_reference_grid_is_floored_and_on_the_grid() -> None:
    task = HMMFilter(5, 5, 20, levels=100, floor=5)
    b = task.sample(500, _gen(2))
    entries = b.tokens[:, : task.context_len].reshape(500, 10, 5)
    assert int(entries.min()) >= 5  # every probability >= 0.05
    assert bool((entries.sum(-1) == 100).all())  # rows sum to 1 on the 0.01 grid
    assert task.vocab_size == 101 + 5
    multinomial = HMMFilter(5, 5, 20, levels=10).sample(500, _gen(2))
    assert int(multinomial.tokens[:, :50].min()) == 0  # the old quantization allows zeros
    with pytest.raises(ValueError, match="floor"):
        HMMFilter(5, 5, 20, levels=20, floor=5)


def test_hmm_markers_spell_the_reference_layout_around_the_same_filter() -> None:
    plain = HMMFilter(5, 5, 20, levels=100, floor=5)
    marked = HMMFilter(5, 5, 20, levels=100, floor=5, markers=True)
    a, b = plain.sample(4, _gen(3)), marked.sample(4, _gen(3))
    assert marked.seq_len == 93 and marked.vocab_size == plain.vocab_size + 4
    trans, emit, sep, obs = range(plain.vocab_size, plain.vocab_size + 4)
    toks = b.tokens
    assert bool((toks[:, 0] == trans).all() and (toks[:, 26] == emit).all())
    assert bool((toks[:, 52] == sep).all() and (toks[:, 53::2] == obs).all())
    # the matrices and the observations are the same tokens as without markers
    assert torch.equal(toks[:, 1:26], a.tokens[:, :25]) and torch.equal(
        toks[:, 27:52], a.tokens[:, 25:50]
    )
    assert torch.equal(toks[:, marked.observed_at], a.tokens[:, 50:])
    # supervised at the observation tokens only, with the same filter and the same states
    assert torch.equal(b.mask.nonzero()[:, 1].reshape(4, 20)[0], marked.observed_at)
    assert torch.equal(b.posterior[b.mask], a.posterior[a.mask])
    assert torch.equal(b.target[b.mask], a.target[a.mask])


def test_forward_filter_on_a_known_chain() -> None:
    # A deterministic flip chain with informative first emission: the state is known exactly.
    a = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]], dtype=torch.float64)
    e = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]], dtype=torch.float64)
    post = forward_filter(a, e, torch.tensor([[0.5, 0.5]]), torch.tensor([[1, 0, 1]]))
    expected = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    torch.testing.assert_close(post, expected)


def _dice_quadrature(rolls: list[int], k: int) -> list[list[float]]:
    """Posterior predictive by integrating theta over the simplex (k = 2 or 3) under Dirichlet(1)."""

    def likelihood(theta: list[float], seen: list[int]) -> float:
        return math.prod(theta[x] for x in seen)

    out = []
    for t in range(len(rolls)):
        seen = rolls[:t]
        if k == 2:
            z = integrate.quad(lambda p, seen=seen: likelihood([p, 1 - p], seen), 0, 1)[0]
            pred = [
                integrate.quad(lambda p, j=j, seen=seen: likelihood([p, 1 - p], [*seen, j]), 0, 1)[
                    0
                ]
                / z
                for j in range(2)
            ]
        else:

            def mass(extra: list[int], seen: list[int] = seen) -> float:
                return integrate.dblquad(
                    lambda q, p: likelihood([p, q, 1 - p - q], seen + extra),
                    0,
                    1,
                    0,
                    lambda p: 1 - p,
                )[0]

            z = mass([])
            pred = [mass([j]) / z for j in range(3)]
        out.append(pred)
    return out


@pytest.mark.parametrize(("k", "length"), [(2, 7), (3, 4)])
def test_dice_posterior_matches_quadrature(k: int, length: int) -> None:
    task = DiceCounting(k, length)
    b = task.sample(2, _gen(3))
    for i in range(2):
        rolls = b.target[i].tolist()
        assert b.tokens[i, 0] == k and b.tokens[i, 1:].tolist() == rolls[:-1]
        np.testing.assert_allclose(b.posterior[i].numpy(), _dice_quadrature(rolls, k), atol=1e-7)


def test_make_task_and_validation() -> None:
    assert isinstance(make_task("bijection", n_symbols=3), Bijection)
    assert make_task("hmm", n_states=2, n_observations=3, length=4).seq_len == 2 * 5 + 4
    with pytest.raises(ValueError, match="unknown task"):
        make_task("parity")
    with pytest.raises(ValueError, match="n_symbols"):
        Bijection(1)
    with pytest.raises(ValueError, match="n_pairs"):
        Bijection(5, n_pairs=6)
    with pytest.raises(ValueError, match="n_pairs"):
        Bijection(5, n_pairs=0)


def test_the_sticky_chain_s_posterior_is_the_transition_row_of_the_last_symbol() -> None:
    from implicit_em.windtunnel.tasks import StickyMarkov

    task = StickyMarkov(n_symbols=8, length=12, stay=0.3)
    p = task.transitions()
    assert torch.allclose(p.sum(1), torch.ones(8, dtype=torch.float64))
    assert torch.allclose(p.diag(), torch.full((8,), 0.3, dtype=torch.float64))
    assert torch.equal(p, StickyMarkov(n_symbols=8, length=3).transitions())
    batch = task.sample(4000, torch.Generator().manual_seed(0))
    assert torch.equal(batch.posterior, p[batch.tokens]) and bool(batch.mask.all())
    assert torch.equal(batch.tokens[:, 1:], batch.target[:, :-1])
    # The drawn next symbols follow the rows: empirical transition frequencies match P.
    counts = torch.zeros(8, 8, dtype=torch.float64)
    counts.index_put_(
        (batch.tokens.flatten(), batch.target.flatten()), torch.ones(1).double(), accumulate=True
    )
    assert torch.allclose(counts / counts.sum(1, keepdim=True), p, atol=0.02)
    with pytest.raises(ValueError, match="stay"):
        StickyMarkov(stay=1.0)

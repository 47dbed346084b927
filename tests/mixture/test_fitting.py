"""The prepared chunks of a fit: kept across passes within the budget, else prepared anew."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.fitting import PreparedChunks
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.reseed import WorstSamples
from implicit_em.mixture.step_rules import make_step_rule


def _source(x: torch.Tensor, calls: list[int]):
    def chunks():
        calls.append(1)
        return iter(x.split(50))

    return chunks


@pytest.mark.parametrize(
    ("n_rows", "max_bytes", "expected_calls"),
    [
        (200, 2**20, 1),
        (200, 0, 3),
        (200, 200 * 6 * 8 - 1, 3),
        (200, 200 * 6 * 8, 1),
        (None, 2**20, 3),
    ],
)
def test_chunks_are_kept_only_within_the_budget(n_rows, max_bytes, expected_calls):
    """diag's kept rows (the shifted data and its squares [y, y^2]) of 200 float64 rows of 3
    features take 9,600 bytes: kept under a budget of 1 MiB or 9,600 bytes, prepared at
    every pass under 0 or 9,599 bytes, or for a stream."""
    x = torch.randn(200, 3, dtype=torch.float64)
    model = covariance_model("diag")
    mixture = Mixture.from_covariances(
        model, torch.full((2,), 0.5, dtype=x.dtype), x[:2].clone(), torch.ones(2, 3, dtype=x.dtype)
    )
    calls: list[int] = []
    chunks = PreparedChunks(_source(x, calls), n_rows, max_bytes)
    rule = make_step_rule("em", 1e-6, None, shift=mixture.shift)
    sums = []
    for _ in range(3):
        rule.begin(mixture)
        for prepared in chunks(rule):
            rule.accumulate_prepared(prepared)
        sums.append(rule.sums["second"].clone())
    assert len(calls) == expected_calls
    torch.testing.assert_close(sums[0], sums[2], rtol=0, atol=0)


@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    capacity=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    offset=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_deferred_worst_samples_equal_the_immediate_ones(sizes, capacity, seed, offset):
    """Kept chunks (their lowest found once, when read) give the candidates of chunks taken
    one `topk` at a time: the same lowest log-likelihoods, ascending, and the same rows
    (distinct values, so no tie decides), mixing kept and other chunks included."""
    g = torch.Generator().manual_seed(seed)
    chunks = [torch.randn(n, 3, generator=g, dtype=torch.float64) for n in sizes]
    log_ps = torch.randperm(10_000, generator=g)[: sum(sizes)].double().split(sizes)
    shift = torch.randn(3, generator=g, dtype=torch.float64) if offset else None
    like = torch.zeros(1, dtype=torch.float64)
    immediate, deferred = WorstSamples(capacity, 3, like), WorstSamples(capacity, 3, like)
    for i, (x, log_p) in enumerate(zip(chunks, log_ps, strict=True)):
        immediate.add(x, log_p, shift)
        deferred.add(x, log_p, shift, kept=i % 3 != 1)
    assert torch.equal(deferred.values, immediate.values)
    assert torch.equal(deferred.points, immediate.points)

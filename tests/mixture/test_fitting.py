"""The prepared chunks of a fit: kept across passes within the budget, else prepared anew."""

from __future__ import annotations

import pytest
import torch

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.fitting import PreparedChunks
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.step_rules import make_step_rule


def _source(x: torch.Tensor, calls: list[int]):
    def chunks():
        calls.append(1)
        return iter(x.split(50))

    return chunks


@pytest.mark.parametrize(
    ("n_rows", "max_bytes", "expected_calls"),
    [(200, 2**20, 1), (200, 0, 3), (200, 200 * 2 * 3 * 8 - 1, 3), (None, 2**20, 3)],
)
def test_chunks_are_kept_only_within_the_budget(n_rows, max_bytes, expected_calls):
    """diag's [y^2, y] of 200 float64 rows of 3 features take 9,600 bytes: kept under a
    budget of 1 MiB, prepared at every pass under 0 or 9,599 bytes, or for a stream."""
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

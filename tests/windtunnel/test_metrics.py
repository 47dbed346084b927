"""Metrics in bits on distributions whose entropies and divergences are known in closed form."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em.windtunnel.metrics import (
    entropy_bits,
    kl_bits,
    position_errors,
    predictive_log_probs,
)


def test_entropy_of_known_distributions() -> None:
    p = torch.tensor([[0.25] * 4, [0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(
        entropy_bits(p.log()), torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64)
    )


def test_kl_of_known_distributions() -> None:
    p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    assert float(kl_bits(p, q.log())) == pytest.approx(1.0)
    assert float(kl_bits(q, q.log())) == 0.0
    assert math.isinf(float(kl_bits(q, p.log())))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(-5, 5), min_size=2, max_size=8),
    st.lists(st.floats(-5, 5), min_size=2, max_size=8),
)
def test_kl_is_nonnegative_and_entropy_bounded(a: list[float], b: list[float]) -> None:
    k = min(len(a), len(b))
    p = torch.softmax(torch.tensor(a[:k], dtype=torch.float64), -1)
    log_q = torch.log_softmax(torch.tensor(b[:k], dtype=torch.float64), -1)
    assert float(kl_bits(p, log_q)) >= -1e-12
    assert -1e-12 <= float(entropy_bits(p.log())) <= math.log2(k) + 1e-12


def test_sigmoid_predictions_are_normalized_at_evaluation() -> None:
    z = torch.tensor([[2.0, -1.0, 0.5]])
    q = predictive_log_probs(z, "sigmoid").exp()
    s = torch.sigmoid(z.double())
    torch.testing.assert_close(q, s / s.sum(-1, keepdim=True))
    torch.testing.assert_close(predictive_log_probs(z, "ce").exp(), torch.softmax(z.double(), -1))
    with pytest.raises(ValueError):
        predictive_log_probs(z, "mse")


def test_position_errors_per_position_and_mean() -> None:
    # Two sequences, three positions, two answers; position 1 is never supervised.
    posterior = torch.tensor([[[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]]] * 2, dtype=torch.float64)
    q = torch.tensor(
        [[[0.5, 0.5], [0.9, 0.1], [0.5, 0.5]], [[1.0, 0.0], [0.9, 0.1], [1.0, 0.0]]],
        dtype=torch.float64,
    )
    mask = torch.tensor([[True, False, True], [True, False, False]])
    e = position_errors(posterior, q.log(), mask)
    # |H(q) - H(p)|: seq 0: pos0 0, pos2 1; seq 1: pos0 1.  KL: seq 0: pos0 0, pos2 1; seq 1: pos0 inf.
    torch.testing.assert_close(e.entropy_mae[[0, 2]], torch.tensor([0.5, 1.0], dtype=torch.float64))
    assert math.isnan(float(e.entropy_mae[1])) and math.isnan(float(e.kl[1]))
    assert e.bits_mae == pytest.approx(2.0 / 3.0)
    assert math.isinf(e.kl_mean)
    torch.testing.assert_close(e.entropy[[0, 2]], torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert e.supervised.tolist() == [True, False, True]
    exact = position_errors(posterior, posterior.log(), mask)
    assert exact.bits_mae == 0.0 and exact.kl_mean == 0.0

"""The OpenOOD-style scores and metrics of E8's baselines, against direct computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from implicit_em.report.experiments import _open_set_scores as os_


def test_logit_scores_match_their_formulas() -> None:
    z = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]], dtype=torch.float64)
    scores = os_.logit_scores(z)
    p0 = math.exp(2) / (math.exp(2) + 1 + math.exp(-1))
    assert scores["msp"].tolist() == pytest.approx([-p0, -1 / 3])
    assert scores["energy"].tolist() == pytest.approx(
        [-math.log(math.exp(2) + 1 + math.exp(-1)), -(0.5 + math.log(3))]
    )
    assert scores["max_logit"].tolist() == pytest.approx([-2.0, -0.5])


def test_mahalanobis_is_the_nearest_class_mean_under_the_tied_covariance() -> None:
    g = torch.Generator().manual_seed(0)
    h_train = torch.randn(200, 3, generator=g, dtype=torch.float64)
    y_train = torch.arange(200) % 2
    h_train[y_train == 1] += 3.0
    h = torch.randn(7, 3, generator=g, dtype=torch.float64)
    x, y = h_train.numpy(), y_train.numpy()
    means = np.stack([x[y == c].mean(0) for c in range(2)])
    centred = x - means[y]
    cov = centred.T @ centred / len(x)
    cov += 1e-6 * np.trace(cov) / 3 * np.eye(3)
    inv = np.linalg.inv(cov)
    expected = [min((v - m) @ inv @ (v - m) for m in means) for v in h.numpy()]
    got = os_.mahalanobis(h_train, y_train, h, 2)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9)
    with pytest.raises(ValueError, match="every class"):
        os_.mahalanobis(h_train, y_train, h, 3)


@pytest.mark.parametrize("k", [1, 3])
def test_knn_is_the_kth_normalized_neighbour(k: int) -> None:
    g = torch.Generator().manual_seed(1)
    bank, h = torch.randn(50, 4, generator=g), torch.randn(9, 4, generator=g)
    b = bank.double() / bank.double().norm(dim=1, keepdim=True)
    q = h.double() / h.double().norm(dim=1, keepdim=True)
    expected = torch.cdist(q, b).sort(dim=1).values[:, k - 1]
    torch.testing.assert_close(os_.knn(bank, h, k=k, chunk=4), expected)
    with pytest.raises(ValueError, match="k must be"):
        os_.knn(bank, h, k=51)


def test_open_set_metrics_on_known_orderings() -> None:
    unknown = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=bool)
    perfect = os_.open_set_metrics(np.arange(8.0), unknown)
    assert perfect == {"auroc": 1.0, "aupr_in": 1.0, "aupr_out": 1.0, "fpr95": 0.0}
    reversed_ = os_.open_set_metrics(-np.arange(8.0), unknown)
    assert reversed_["auroc"] == 0.0 and reversed_["fpr95"] == 1.0
    # One known input (score 5) above three unknowns: flagging all 4 unknowns flags 2 knowns.
    score = np.array([0.0, 1.0, 5.0, 6.0, 2.0, 3.0, 4.0, 7.0])
    m = os_.open_set_metrics(score, unknown)
    assert m["fpr95"] == 0.5
    assert m["auroc"] == pytest.approx(10 / 16)
    with pytest.raises(ValueError, match="both known and unknown"):
        os_.open_set_metrics(np.arange(3.0), np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="non-finite"):
        os_.open_set_metrics(np.array([0.0, np.nan]), np.array([0, 1], dtype=bool))


def test_vim_on_a_worked_example() -> None:
    """Second moment diag(2, 2, 0.25) about u = 0: the principal plane is x-y, the residual is
    |h_z|; α = Σ max z / Σ residual = 4 / 2 = 2; for h = (1, 1, 3), z = (1, 1): the score is
    2 · 3 − log(e + e) = 5 − log 2."""
    weight = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    h_train = torch.tensor(
        [[2.0, 0.0, 0.5], [0.0, 2.0, -0.5], [-2.0, 0.0, 0.5], [0.0, -2.0, -0.5]],
        dtype=torch.float64,
    )
    h = torch.tensor([[1.0, 1.0, 3.0]], dtype=torch.float64)
    expected = 5.0 - math.log(2.0)
    for bias in ([0.0, 0.0], [1.0, -1.0]):
        b = torch.tensor(bias, dtype=torch.float64)
        # The origin u = −W⁺b = (−b₁, −b₂, 0): shifting the features by u leaves the score.
        u = torch.tensor([-bias[0], -bias[1], 0.0], dtype=torch.float64)
        train, test = h_train + u, h + u
        score = os_.vim(train, train @ weight.T + b, test, test @ weight.T + b, weight, b, dim=2)
        assert score.tolist() == pytest.approx([expected])
    with pytest.raises(ValueError, match="dim must be"):
        os_.vim(h_train, h_train[:, :2], h, h[:, :2], weight, torch.zeros(2), dim=3)


def test_react_clips_at_the_training_percentile_then_takes_the_energy() -> None:
    """Training features 0..10: the 90th percentile is 9, so 12 is clipped to 9 and 3 kept."""
    h_train = torch.arange(11, dtype=torch.float64)[:, None]
    h = torch.tensor([[12.0], [3.0]], dtype=torch.float64)
    score = os_.react_energy(h_train, h, lambda f: torch.cat([f, -f], dim=1))
    expected = [-math.log(math.exp(9) + math.exp(-9)), -math.log(math.exp(3) + math.exp(-3))]
    assert score.tolist() == pytest.approx(expected)
    assert float(os_.react_clip(h_train)) == 9.0
    given = os_.react_energy(
        h_train, h, lambda f: torch.cat([f, -f], dim=1), clip=torch.tensor(9.0)
    )
    assert given.tolist() == score.tolist()


def test_the_baseline_is_chosen_on_validation() -> None:
    validation = {"softmax/msp": 0.7, "sigmoid/knn": 0.9, "distance/energy": 0.9}
    assert os_.chosen_on_validation(validation) == "sigmoid/knn"
    with pytest.raises(ValueError, match="at least one"):
        os_.chosen_on_validation({})
    with pytest.raises(ValueError, match="NaN"):
        os_.chosen_on_validation({"softmax/msp": float("nan")})

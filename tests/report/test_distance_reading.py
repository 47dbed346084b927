"""m3's measurements on small trained heads and on planted distance logits."""

from __future__ import annotations

import pytest
import torch

from implicit_em.report.experiments import _distance_reading as dr

CONFIG = {"hidden": 16, "features": 4, "lr": 1e-2, "batch": 32, "steps": 150}


def _blobs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    centres = torch.tensor([[3.0, 0, 0, 0, 0], [0, 3.0, 0, 0, 0], [0, 0, 3.0, 0, 0]])
    x = centres[y] + 0.7 * torch.randn(n, 5, generator=g)
    return x - x.mean(0), y


def test_distance_head_density_falls_along_rays() -> None:
    x, y = _blobs(300, 0)
    model = dr.train_head("distance", x, y, 3, 0, CONFIG)
    far = dr.far_from_data(model.logits, x[:60], [1.0, 4.0, 16.0])
    assert far["lse_rise_share"] < 0.2
    assert far["lse"][2] < far["lse"][0]


def test_linear_head_measurements_are_shares_and_aurocs() -> None:
    x, y = _blobs(300, 1)
    model = dr.train_head("linear", x, y, 3, 0, CONFIG)
    far = dr.far_from_data(model.logits, x[:60], [1.0, 8.0])
    assert 0.0 <= far["lse_rise_share"] <= 1.0
    assert far["confidence"][1] >= 1 / 3
    assert 0.0 <= dr.density_auroc(model.logits, x[:60], dr.scrambled(x[:60], 0)) <= 1.0


def test_scrambled_keeps_each_rows_values_and_norm() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    s = dr.scrambled(x, 0)
    assert torch.equal(s.sort(1).values, x.sort(1).values)
    assert not torch.equal(s, x)
    assert torch.equal(dr.scrambled(x, 0), s)


def test_density_auroc_on_a_worked_example() -> None:
    # Logits whose log-sum-exp is the input itself: LSE(x) = x.
    def logits(v: torch.Tensor) -> torch.Tensor:
        return v[:, :1]

    inside = torch.tensor([[3.0], [1.0]])
    outside = torch.tensor([[2.0], [0.0], [1.0]])
    # Pairs (inside > outside): 3 beats all three, 1 beats 0 and ties 1: (3 + 1 + 0.5) / 6.
    assert dr.density_auroc(logits, inside, outside) == pytest.approx(4.5 / 6)


def test_planted_gaussian_logits_are_a_density_and_its_opposite() -> None:
    x, y = _blobs(300, 3)
    far = dr.scrambled(x, 1) * 3.0
    density = dr.class_gaussian_logits(x, y, 3)
    opposite = dr.class_gaussian_logits(x, y, 3, sign=-1.0)
    assert dr.density_auroc(density, x, far) > 0.9
    assert dr.density_auroc(opposite, x, far) < 0.1
    z = density(x[:5])
    assert z.shape == (5, 3) and (z <= 0).all()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="head must be"):
        dr.HeadClassifier("softmax", 5, 4, 2, 3)
    model = dr.HeadClassifier("linear", 5, 4, 2, 3)
    with pytest.raises(ValueError, match="increasing"):
        dr.far_from_data(model.logits, torch.zeros(2, 5), [2.0, 1.0])

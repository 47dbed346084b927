"""m3's two measurements on small trained heads, and the control that decides them by construction."""

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


def test_distance_head_density_falls_far_from_the_data() -> None:
    x, y = _blobs(300, 0)
    model = dr.train_head("distance", x, y, 3, 0, CONFIG)
    far = dr.far_from_data(model, x[:60], [1.0, 4.0, 16.0])
    assert far["lse_rise_share"] < 0.2
    assert far["lse"][2] < far["lse"][0]


def test_linear_head_measurements_are_shares_and_correlations() -> None:
    x, y = _blobs(300, 1)
    model = dr.train_head("linear", x, y, 3, 0, CONFIG)
    far = dr.far_from_data(model, x[:60], [1.0, 8.0])
    assert 0.0 <= far["lse_rise_share"] <= 1.0
    assert far["confidence"][1] >= 1 / 3
    xt, _yt = _blobs(90, 2)
    rho = dr.rank_agreement(model, x, y, xt, 3)
    assert -1.0 <= rho <= 1.0
    # Well-separated Gaussian classes: the trained logits order classes like the fitted model.
    assert rho > 0.5


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="head must be"):
        dr.HeadClassifier("softmax", 5, 4, 2, 3)
    model = dr.HeadClassifier("linear", 5, 4, 2, 3)
    with pytest.raises(ValueError, match="increasing"):
        dr.far_from_data(model, torch.zeros(2, 5), [2.0, 1.0])

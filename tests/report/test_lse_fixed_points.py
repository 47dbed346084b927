"""T3 on the LSE objective without volume: gradient, EM and gradient-descent fixed points."""

from __future__ import annotations

import torch

from implicit_em.report.experiments import _lse_fixed_points as lf


def _three_clusters(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]], dtype=torch.float64)
    return centres[torch.arange(150) % 3] + 0.5 * torch.randn(150, 2, generator=g).double()


def test_gradient_matches_autograd() -> None:
    x = _three_clusters(0)
    means = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    d = torch.cdist(x, means) ** 2 / (2 * 0.8**2)
    loss = -torch.logsumexp(-d, dim=1).mean()
    (expected,) = torch.autograd.grad(loss, means)
    torch.testing.assert_close(lf.lse_gradient(x, means.detach(), 0.8), expected)
    assert abs(lf.lse_objective(x, means.detach(), 0.8) - float(loss.detach())) < 1e-12


def test_em_fixed_point_is_stationary_and_gd_reaches_it_from_a_good_start() -> None:
    x = _three_clusters(1)
    start = torch.tensor([[0.5, 0.5], [4.0, 0.5], [0.5, 4.0]], dtype=torch.float64)
    em = lf.em_fixed_point(x, start, 1.0, 1e-10, 5000)
    assert em.converged
    assert float(lf.lse_gradient(x, em.means, 1.0).abs().max()) < 1e-8
    result = lf.compare_from_start(x, start, 1.0, 1e-9, 20000, 1e-5)
    assert result["landed"] == "same" and result["same"] == 1.0
    assert result["em_gradient"] < 1e-9  # EM's fixed point is stationary (the gate)
    assert abs(result["em_objective"] - result["gd_objective"]) < 1e-9


def test_an_unreached_tolerance_is_reported_as_not_stationary() -> None:
    x = _three_clusters(2)
    start = x[:3].clone()
    result = lf.compare_from_start(x, start, 1.0, 1e-12, 2, 1e-5)
    assert result["landed"] == "not stationary" and result["same"] == 0.0


def test_matched_difference_ignores_the_order_of_components() -> None:
    a = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    assert lf.matched_difference(a, a.flip(0)) == 0.0
    assert lf.matched_difference(a, a + 0.25) == 0.25

"""E9's baselines: the Gaussian experts' likelihood, EM for a mixture of experts, the constant gate."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from implicit_em.report.experiments import _moe_em as me


def test_gaussian_expert_nll_is_the_mixture_density() -> None:
    g = torch.Generator().manual_seed(0)
    y, o = torch.randn(5, 1, generator=g).double(), torch.randn(5, 3, generator=g).double()
    log_sigma = torch.tensor([0.0, -1.0, 0.5], dtype=torch.float64)
    log_g = torch.log_softmax(torch.randn(5, 3, generator=g).double(), dim=-1)
    density = (
        log_g.exp()
        * torch.exp(-0.5 * ((y - o) / log_sigma.exp()) ** 2)
        / (log_sigma.exp() * math.sqrt(2 * math.pi))
    ).sum(-1)
    expected = -(density.log().mean()) - 0.5 * math.log(2 * math.pi)
    got = me.gaussian_expert_nll(y, o, log_sigma, log_g)
    assert abs(float(got) - float(expected)) < 1e-12


def _two_lines(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    y = torch.where(x < 0, 2 * x + 1, -x) + 0.05 * torch.randn(n, 1, generator=g)
    return x, y


def test_em_recovers_two_lines_and_their_noise() -> None:
    torch.manual_seed(0)
    x, y = _two_lines(400)
    gate = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 2))
    fit = me.em_fit(
        x,
        y,
        slopes=torch.tensor([1.0, -0.5]),
        intercepts=torch.tensor([0.5, 0.0]),
        log_sigma=torch.zeros(2),
        gate=gate,
        iterations=40,
        gate_steps=5,
    )
    order = fit.slopes.argsort(descending=True)
    torch.testing.assert_close(
        fit.slopes[order], torch.tensor([2.0, -1.0]).double(), atol=0.1, rtol=0
    )
    torch.testing.assert_close(
        fit.intercepts[order], torch.tensor([1.0, 0.0]).double(), atol=0.1, rtol=0
    )
    assert (fit.log_sigma.exp() < 0.1).all()
    assert fit.nll[-1] < fit.nll[0] - 1.0
    assert len(fit.nll) == 41
    assert torch.allclose(fit.h.sum(-1), torch.ones(400, dtype=torch.float64))


def test_constant_gate_is_uniform_and_has_no_parameters() -> None:
    gate = me.ConstantGate(3)
    out = torch.log_softmax(gate(torch.randn(4, 1)), dim=-1)
    assert out.shape == (4, 3)
    assert torch.allclose(out, torch.full((4, 3), -math.log(3)))
    assert not list(gate.parameters())


SMALL = {
    "slopes": [2.0, -4.0],
    "intercepts": [4.0, -2.0],
    "noise": 0.1,
    "sigma": 0.3,
    "start": "kmeans",
    "experts": 2,
    "gate_hidden": 8,
    "lr": 1e-2,
    "batch": 128,
    "n_train": 256,
    "n_test": 128,
    "steps": 10,
    "em_iterations": 5,
    "em_gate_steps": 2,
}


def test_baselines_measure_purity_and_learned_noise() -> None:
    for kind in me.BASELINES:
        m = me.baseline(kind, 0, SMALL)
        assert 0.5 <= m["purity"] <= 1 and 0.5 <= m["owner_purity"] <= 1
        assert m["kl"] >= 0 and m["sigma"] > 0
    assert me.baseline("gate_free", 0, SMALL)["sigma"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="kind must be"):
        me.baseline("blend", 0, SMALL)

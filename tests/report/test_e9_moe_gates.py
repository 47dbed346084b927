"""E9: the task, the gate's gradient, purity and KL, a smoke run and the verdict rule."""

from __future__ import annotations

import pytest
import torch

from implicit_em.core import responsibilities
from implicit_em.objectives import mixture_nll
from implicit_em.report import select
from implicit_em.report.experiments import _expert_training as training
from implicit_em.report.experiments import _experts as experts
from implicit_em.report.experiments._experts import start_model

(E9,) = select(["E9"])


def test_piecewise_task():
    config = {"slopes": [1.0, -1.0], "intercepts": [0.0, 2.0], "noise": 0.0}
    x, y, segment = experts.piecewise_task(100, config, torch.Generator().manual_seed(0))
    assert x.shape == (100, 1) and y.shape == (100, 1)
    assert torch.equal(segment, (x[:, 0] >= 0).long())
    expected = torch.where(segment == 0, x[:, 0], -x[:, 0] + 2.0)
    assert torch.allclose(y[:, 0], expected)


def test_mixture_gradients_are_responsibilities():
    """∂ℓ/∂d = h/B and ∂ℓ/∂gate-logits = (g − h)/B: the gate is pulled towards h."""
    torch.manual_seed(0)
    b, k = 10, 3
    y = torch.randn(b, 1, dtype=torch.float64)
    o = torch.randn(b, k, dtype=torch.float64)
    logits = torch.randn(b, k, dtype=torch.float64, requires_grad=True)
    d = experts.expert_distances(y, o).requires_grad_(True)
    log_g = torch.log_softmax(logits, -1)
    mixture_nll(d, log_prior=log_g).backward()
    h = responsibilities(d.detach(), log_prior=log_g.detach())
    assert torch.allclose(d.grad * b, h, atol=1e-12)
    assert torch.allclose(logits.grad * b, log_g.exp().detach() - h, atol=1e-12)


def test_gate_kl_matches_torch():
    torch.manual_seed(0)
    h = torch.softmax(torch.randn(6, 4, dtype=torch.float64), -1)
    log_g = torch.log_softmax(torch.randn(6, 4, dtype=torch.float64), -1)
    expected = torch.nn.functional.kl_div(log_g, h, reduction="none").sum(-1)
    assert torch.allclose(experts.gate_kl(h, log_g), expected)
    one_hot = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    assert float(experts.gate_kl(one_hot, one_hot.clamp_min(1e-300).log())) == 0.0


def test_matched_purity():
    segment = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    assert experts.matched_purity(torch.tensor([2, 2, 0, 0, 3, 3, 1, 1]), segment, 4, 4) == 1.0
    # One expert covers two segments: only one of them can be matched to it.
    assert experts.matched_purity(torch.tensor([2, 2, 2, 2, 3, 3, 1, 1]), segment, 4, 4) == 0.75
    assert experts.matched_purity(torch.tensor([0, 1, 0, 1, 2, 2, 3, 3]), segment, 4, 4) == 0.75


def test_planted_starts():
    config = {
        "slopes": [1.0, -1.0],
        "intercepts": [0.0, 2.0],
        "experts": 2,
        "gate_hidden": 4,
        "planted_experts": True,
        "planted_gate": True,
    }
    model = start_model(config)
    assert model.experts.weight[:, 0].tolist() == [1.0, -1.0]
    assert model.experts.bias.tolist() == [0.0, 2.0]
    x = torch.tensor([[-0.5], [0.5]])
    # The planted gate puts logit 10 on the expert of each point's segment and has no parameters.
    assert model.gate(x).tolist() == [[10.0, 0.0], [0.0, 10.0]]
    assert not list(model.gate.parameters())
    with pytest.raises(ValueError, match="one expert per segment"):
        start_model({**config, "experts": 3})


def test_kmeans_start_finds_separated_lines():
    """Two well-separated lines: the k-means start puts one expert on each."""
    torch.manual_seed(0)
    config = {"slopes": [1.0, -1.0], "intercepts": [-3.0, 3.0], "noise": 0.05}
    x, y, _ = experts.piecewise_task(400, config, torch.Generator().manual_seed(0))
    slopes, intercepts = experts.kmeans_lines(x, y, 2)
    order = intercepts.argsort()
    torch.testing.assert_close(slopes[order], torch.tensor([1.0, -1.0]), atol=0.1, rtol=0)
    torch.testing.assert_close(intercepts[order], torch.tensor([-3.0, 3.0]), atol=0.1, rtol=0)
    model = start_model({**config, "experts": 2, "gate_hidden": 4, "start": "kmeans"}, data=(x, y))
    assert sorted(model.experts.bias.tolist()) == pytest.approx(sorted(intercepts.tolist()))
    with pytest.raises(ValueError, match="k-means start needs"):
        start_model({**config, "experts": 2, "gate_hidden": 4, "start": "kmeans"})


def test_specialisation_is_a_share_with_an_exact_interval():
    from implicit_em.report.experiments import e9_moe_gates as e9

    assert [e9.specialized(p) for p in (0.95, 0.9, 0.75)] == [1.0, 1.0, 0.0]
    # 10 of 10 seeds: the exact 95% interval is [0.025^(1/10), 1].
    assert e9.share_cell([1.0] * 10) == "10/10 [0.69, 1.00]"
    assert (
        e9.modes_line("m", [0.5, 0.51, 0.75, 0.76]) == "m: 2 seed(s) at 0.505; 2 seed(s) at 0.755"
    )


def test_gate_gradient_is_its_distance_from_the_responsibilities():
    torch.manual_seed(0)
    config = {"slopes": [1.0, -1.0], "intercepts": [0.0, 2.0], "noise": 0.1}
    x, y, _ = experts.piecewise_task(64, config, torch.Generator().manual_seed(0))
    model = start_model({**config, "experts": 2, "gate_hidden": 4})
    assert training.gate_gradient_residual(model, x, y) < 1e-6


def test_smoke_run(tmp_path):
    outcome = E9.run({**E9.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    for objective in training.OBJECTIVES:
        assert 0.25 <= n[f"purity_{objective}"] <= 1 and n[f"kl_{objective}"] >= 0
    # The tracer's per-expert mass is the mean of h read here from the same gradient.
    assert n["trace_agreement"] < 1e-5 and n["trace_residual"] < 1e-5
    assert n["gate_gradient_residual"] < 1e-5
    assert all((tmp_path / f.path).is_file() for f in outcome.figures)
    assert E9.judge(outcome).verdict not in ("not run", "invalid")
    for criterion in E9.rule.criteria:
        assert len(outcome.samples[criterion.number]) >= len(E9.configs["smoke"]["seeds"])

"""E17: the noisy-key retrieval task, its posterior, the rival weightings and the experiment."""

from __future__ import annotations

import math

import pytest
import torch

from implicit_em.report.experiments import _key_retrieval as kr
from implicit_em.report.experiments.e17_attention_posterior import EXPERIMENT
from implicit_em.report.judging.controls import control_statuses

KEYS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -0.5]])


def _monte_carlo_posterior(query: torch.Tensor, noise: float, radius: float) -> torch.Tensor:
    """The share of each latent key among simulated queries within `radius` of `query`."""
    generator = torch.Generator().manual_seed(0)
    n = 4_000_000
    z = torch.randint(len(KEYS), (n,), generator=generator)
    queries = KEYS[z] + noise * torch.randn(n, 2, generator=generator)
    near = (queries - query).norm(dim=-1) < radius
    return torch.bincount(z[near], minlength=len(KEYS)).double() / near.sum()


@pytest.mark.parametrize("noise", [0.5, 1.0])
def test_the_analytic_posterior_matches_a_monte_carlo_estimate(noise):
    query = torch.tensor([0.3, 0.2])
    exact = kr.posterior(query[None], KEYS[None], noise)[0].double()
    estimate = _monte_carlo_posterior(query, noise, radius=0.05)
    assert torch.allclose(exact, estimate, atol=0.03), (exact, estimate)
    wrong = kr.posterior(query[None], KEYS[None], 2 * noise)[0].double()
    assert (wrong - estimate).abs().max() > 0.05  # the check can fail


def test_keys_lie_on_the_sphere_and_queries_are_noisy_keys():
    task = kr.Task(keys=5, dim=4, value_dim=3, noise=0.0)
    e = kr.draw(task, 64, torch.Generator().manual_seed(1))
    assert torch.allclose(e.keys.norm(dim=-1), torch.full((64, 5), 2.0))
    assert torch.equal(e.queries, e.keys[torch.arange(64), e.z])
    assert e.values.shape == (64, 5, 3)


def test_the_weightings_differ_only_in_the_exponential_and_normalize_step():
    scores = torch.tensor([[2.0, -1.0, 0.5]])
    assert torch.allclose(kr.weigh(scores, "softmax").sum(), torch.tensor(1.0))
    assert torch.allclose(kr.weigh(scores, "sigmoid"), torch.sigmoid(scores))
    assert torch.allclose(kr.weigh(scores, "relu"), torch.tensor([[0.8, 0.0, 0.2]]))
    with pytest.raises(ValueError, match="weighting"):
        kr.weigh(scores, "tanh")


def test_the_reading_is_zero_at_the_posterior_and_normalizes_the_weights():
    task = kr.Task(keys=8, dim=8, value_dim=8, noise=2.0)
    e = kr.held_out(task, 3, 500)
    p = kr.posterior(e.queries, e.keys, task.noise)
    at_posterior = kr.read(p, e, task)
    assert at_posterior["tv"] < 1e-6 and abs(at_posterior["kl"]) < 1e-6
    assert kr.read(3 * p, e, task)["tv"] < 1e-6  # weights are read normalized
    uniform = kr.read(torch.ones_like(p), e, task)
    assert uniform["tv"] > 0.2 and uniform["kl"] > 0.1


def test_a_smoke_run_reads_every_weighting(tmp_path):
    config = EXPERIMENT.configs["smoke"]
    outcome = EXPERIMENT.run(config, tmp_path)
    n = outcome.numbers
    for w in kr.WEIGHTINGS:
        assert 0.0 <= n[f"tv_{w}"] <= 1.0 and math.isfinite(n[f"kl_{w}"])
        assert 0.0 <= n[f"accuracy_{w}"] <= 1.0
    for name in ("tv_softmax", "tv_gap_sigmoid", "tv_gap_relu"):
        assert len(outcome.samples[name]) == len(config["seeds"])
    assert n["tv_gap_sigmoid"] == pytest.approx(n["tv_sigmoid"] - n["tv_softmax"])
    assert (tmp_path / "tv.png").exists()


def test_the_controls_come_out_as_planted():
    config = EXPERIMENT.configs["control"]
    for criterion in EXPERIMENT.rule.criteria:
        statuses = control_statuses(criterion, EXPERIMENT.controls[criterion.number], config)
        assert statuses["positive"] == "met", (criterion.number, statuses)
        assert statuses["negative"] == "not met", (criterion.number, statuses)


def test_the_rivals_are_realistic_negative_controls_with_a_baseline():
    data = {c["number"]: c for c in EXPERIMENT.protocol.data["criteria"]}
    for name, c in data.items():
        assert c["negative_control"]["kind"] == "realistic", name
    for rival in ("sigmoid", "relu"):
        gates = data[f"tv_gap_{rival}"]["baseline"]["gates"]
        assert [g["number"] for g in gates] == [f"accuracy_{rival}"]


def test_full_size_runs_ten_confirmatory_seeds():
    assert EXPERIMENT.configs["full"]["seeds"] == list(range(81000, 81010))
    assert all(
        s < 1000
        for size in ("smoke", "quick", "control")
        for s in EXPERIMENT.configs[size]["seeds"]
    )

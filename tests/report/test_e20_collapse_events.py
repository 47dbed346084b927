"""E20: the practitioner's spike monitors, the event readings, and real runs at smoke size."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from implicit_em.report import select
from implicit_em.report.experiments._attention_events import MajorityTransformer
from implicit_em.report.experiments._event_readings import (
    by_alarm,
    detections,
    false_alarms,
    lead_before_onset,
    lead_over,
)
from implicit_em.report.experiments._event_training import first_spike, onset_of
from implicit_em.report.experiments._forward_monitors import first_drop, first_starved, measured
from implicit_em.report.experiments._moe_events import TopKMoE, ablation_costs
from implicit_em.report.experiments.e20_collapse_events import family_config, family_run


def _noisy(n: int, seed: int = 0) -> list[float]:
    return list(1.0 + 0.01 * np.random.default_rng(seed).standard_normal(n))


def test_a_spike_fires_at_its_step_and_noise_alone_does_not():
    values = _noisy(100)
    assert first_spike(values, window=20, k=8.0) is None
    values[60] = 2.0
    assert first_spike(values, window=20, k=8.0) == 60
    assert first_spike(values[:60], window=20, k=8.0) is None


def test_a_spike_needs_a_full_window_and_a_non_finite_value_fires():
    values = _noisy(30)
    values[5] = 50.0  # before the window is full: not read
    assert first_spike(values, window=20, k=8.0) is None
    values[25] = math.inf
    assert first_spike(values, window=20, k=8.0) == 25


def test_a_drop_is_no_spike():
    values = _noisy(60)
    values[40] = 0.0
    assert first_spike(values, window=20, k=8.0) is None


def test_onset_is_one_step_after_the_earliest_dead_component_was_last_active():
    assert onset_of([10, 50, 99], [False, True, False]) == 51
    assert onset_of([10, 50, -1], [True, True, True]) == 0
    assert onset_of([10, 50], [False, False]) is None


RUNS = [
    {
        "event": True,
        "onset": 100,
        "steps": 400,
        "tracer": 80,
        "loss_spike": None,
        "grad_spike": 120,
    },
    {"event": True, "onset": 50, "steps": 400, "tracer": None, "loss_spike": 60, "grad_spike": 10},
    {
        "event": False,
        "onset": None,
        "steps": 400,
        "tracer": None,
        "loss_spike": 5,
        "grad_spike": None,
    },
    {
        "event": False,
        "onset": None,
        "steps": 400,
        "tracer": 30,
        "loss_spike": None,
        "grad_spike": None,
    },
]


def test_detection_and_false_alarms_split_runs_by_the_ground_truth():
    assert detections(RUNS, "tracer") == [1.0, 0.0]
    assert false_alarms(RUNS, "tracer") == [0.0, 1.0]
    assert detections(RUNS, "loss_spike") == [0.0, 1.0]
    assert false_alarms(RUNS, "grad_spike") == [0.0, 0.0]


def test_leads_count_from_the_onset_and_read_a_silent_detector_at_the_end():
    assert lead_before_onset(RUNS, "tracer") == [20.0]
    assert lead_before_onset(RUNS, "grad_spike") == [-20.0, 40.0]
    assert lead_over(RUNS, "loss_spike") == [400.0 - 80.0, 60.0 - 400.0]


def test_each_alarm_reads_as_a_detector_of_its_own():
    runs = [
        {**RUNS[0], "alarm_steps": {"log_z_drift": 80, "attention_entropy_collapse": 110}},
        {**RUNS[2], "alarm_steps": {}},
        {**RUNS[3], "alarm_steps": {"log_z_drift": 30}},
    ]
    alarms = by_alarm(runs)
    assert sorted(alarms) == ["attention_entropy_collapse", "log_z_drift"]
    assert lead_before_onset(alarms["attention_entropy_collapse"], "tracer") == [-10.0]
    assert false_alarms(alarms["log_z_drift"], "tracer") == [0.0, 1.0]
    assert false_alarms(alarms["attention_entropy_collapse"], "tracer") == [0.0, 0.0]


@pytest.fixture(scope="module")
def smoke():
    (experiment,) = select(["E20"])
    return experiment.configs["smoke"]


@pytest.mark.slow
def test_planted_dead_experts_are_dead_and_raise_the_tracers_alarm(smoke):
    run = family_run(family_config(smoke, "moe"), "moe", "planted", 0)
    assert run["event"] and run["onset"] == 0 and run["dead"] >= smoke["moe"]["planted_dead"]
    assert run["traced"] and "router" in run["site_types"]
    assert run["tracer"] is not None and "dead_experts" in run["alarm_kinds"]
    assert run["residuals"]["router"] <= 1e-4


@pytest.mark.slow
def test_the_tracer_finds_no_site_in_a_relu_autoencoder_and_the_run_goes_on(smoke):
    run = family_run(family_config(smoke, "sae"), "sae", "high", 0)
    assert run["traced"] is False and run["site_types"] == [] and run["tracer"] is None
    assert math.isfinite(run["final_loss"]) and 0.0 <= run["dead_share"] <= 1.0


def test_the_forward_monitors_fire_on_a_starved_component_and_a_relative_drop():
    # two experts; expert 1's weight falls to 0 from step 6
    weights = [[0.5, 0.5]] * 6 + [[1.0, 0.0]] * 10
    assert first_starved(measured(weights, 1), window=4, cut=0.01) == 9  # window all starved
    assert first_starved(measured(weights, 1), window=4, cut=0.2) == 8  # means .375, .25, .125
    assert measured(weights, 2)[:2] == [(0, [0.5, 0.5]), (2, [0.5, 0.5])]
    assert first_starved(measured(weights, 2), window=3, cut=0.01) == 10  # steps 6, 8, 10
    assert first_starved(measured(weights[:6], 1), window=4, cut=0.01) is None
    heads = [[2.0, 2.0]] * 5 + [[2.0, 0.1]] * 5
    assert first_drop(measured(heads, 1), ratio=0.1) == 5
    assert first_drop(measured(heads, 1), ratio=0.01) is None
    assert first_drop(measured(heads, 3), ratio=0.1) == 6
    assert first_drop([], ratio=0.1) is None
    with pytest.raises(ValueError, match="every"):
        measured(heads, 0)


def test_an_expert_removed_from_the_router_costs_what_its_tokens_lose():
    torch.manual_seed(0)
    model = TopKMoE(dim=4, experts=3, hidden=5, classes=2, top_k=1)
    with torch.no_grad():
        model.router.bias[:] = torch.tensor([0.0, 0.0, -50.0])  # expert 2 never routed
    x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
    costs = ablation_costs(model, x, y)
    assert costs[2] == pytest.approx(0.0, abs=1e-6)
    logits, probs, index = model(x, without=0)
    assert (index != 0).all() and probs[:, 0].max() == 0.0
    intact = float(torch.nn.functional.cross_entropy(model(x)[0], y))
    assert costs[0] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)) - intact)


def test_the_attention_ablation_replaces_its_output_by_the_batch_mean():
    torch.manual_seed(0)
    model = MajorityTransformer(vocab=4, length=6, width=8, heads=2)
    x = torch.randint(0, 4, (16, 6))
    y = torch.randint(0, 4, (16,))
    with torch.no_grad():
        ablated = model(x, ablate=True)
        same = x[:1].expand(16, -1)  # one sequence repeated: its mean is itself
        assert torch.allclose(model(same, ablate=True), model(same), atol=1e-6)
        assert model.head_entropy(x).shape == (2,)
        assert model.entropy(x) == pytest.approx(float(model.head_entropy(x).mean()))
    assert model.ablation_cost(x, y) == pytest.approx(
        float(
            torch.nn.functional.cross_entropy(ablated, y)
            - torch.nn.functional.cross_entropy(model(x), y)
        ),
        abs=1e-6,
    )


@pytest.mark.slow
def test_experts_held_at_zero_output_stay_at_zero_and_are_dead_by_intervention(smoke):
    run = family_run(family_config(smoke, "moe"), "moe", "zeroed", 0)
    assert run["event"] and run["onset"] == 0 and run["dead"] >= smoke["moe"]["planted_dead"]
    assert "forward" in run and "dead_by_load" in run and math.isfinite(run["ablation_min"])

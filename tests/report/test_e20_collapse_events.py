"""E20: the practitioner's spike monitors, the event readings, and real runs at smoke size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from implicit_em.report import select
from implicit_em.report.experiments._event_readings import (
    by_alarm,
    detections,
    false_alarms,
    lead_before_onset,
    lead_over,
)
from implicit_em.report.experiments._event_training import first_spike, onset_of
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

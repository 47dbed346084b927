"""E12: the one-head arms (the reference's own experiment and the lag task), their training rule,
their timings, and what the smoke run reports."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from implicit_em.report import select
from implicit_em.report.experiments._one_part_freeze import remaining
from implicit_em.report.experiments._sticky_reference import steps_below, sticky_summary
from implicit_em.report.experiments._value_rate import timed
from implicit_em.windtunnel.one_head import OneHead, train
from implicit_em.windtunnel.one_head_tasks import kl_bits, lag_task, sticky_chain, transition_matrix

(E12,) = select(["E12"])


def test_the_reference_head_data_and_first_loss() -> None:
    head = OneHead(20, 10, 15, 8, seed=42)
    assert sum(p.numel() for p in head.parameters()) == 820
    p = transition_matrix(8, 0.3, torch.float32)
    assert torch.allclose(p.sum(1), torch.ones(8))
    assert float(p[0, 0]) == pytest.approx(
        0.3 + 0.3 * 0.7 / (0.3 + 2 * (1 + 1 / 2 + 1 / 3) + 1 / 4)
    )
    assert float(p[0, 1]) == pytest.approx(2 * float(p[0, 2]))  # 1 / circular distance
    data, h_min = sticky_chain(42, 2000, 8, 20, 0.3)
    assert data.x.shape == (1, 1999, 20) and data.y.shape == (1, 1999)
    assert h_min == pytest.approx(1.829, abs=5e-4)
    with torch.no_grad():
        first = F.cross_entropy(head(data.x)[0][0], data.y[0])
    assert float(first) == pytest.approx(2.078, abs=5e-4)  # the reference's own code, seed 42


def test_plain_sgd_moves_each_part_by_its_rate_and_a_frozen_part_not_at_all() -> None:
    data = lag_task(0, 8, 4, 3, 0.5)
    start = OneHead(7, 4, 3, 3, seed=1).double()
    weights = {k: v.clone() for k, v in start.state_dict().items()}
    logits, _ = start(data.x)
    loss = F.cross_entropy(logits.flatten(0, -2), data.y.flatten(), ignore_index=-100)
    grads = dict(zip(weights, torch.autograd.grad(loss, list(start.parameters())), strict=True))
    head = OneHead(7, 4, 3, 3, seed=1).double()
    run = train(head, data.x, data.y, 1, 0.1, {"values": 10.0}, freeze="routing")
    assert run.loss == [pytest.approx(float(loss.detach()))]
    after = head.state_dict()
    for name, rate in (("W_Q", 0.0), ("W_K", 0.0), ("W_V", 1.0), ("W_O", 0.1)):
        assert torch.allclose(after[name], weights[name] - rate * grads[name])


def test_the_lag_task_needs_the_token_one_back() -> None:
    data = lag_task(3, 64, 6, 8, 0.5)
    p = transition_matrix(8, 0.5)
    previous = data.x[:, :, :8].argmax(-1)  # position t carries y_{t-1}
    assert torch.equal(data.p, p[previous[:, :-1]])  # the posterior at t >= 2 is row y_{t-2}
    assert (data.y[:, 0] == -100).all()
    assert kl_bits(data.p, data.p.log()) == pytest.approx(0.0, abs=1e-12)
    # Reading its own token (the first-order rival) cannot reach the posterior.
    own = p[previous[:, 1:]].log()
    assert kl_bits(data.p, own) > 0.1


def test_the_value_rate_timing_can_come_out_either_way() -> None:
    steps = [0, 10, 20, 30, 40]
    faster = timed([1.0, 0.8, 0.5, 0.1, 0.05], [1.0, 0.2, 0.08, 0.06, 0.05], steps)
    assert faster["t_plain"] == 30 and faster["t_fast"] == 20 and faster["speedup_log2"] > 0
    slower = timed([1.0, 0.2, 0.08, 0.06, 0.05], [1.0, 0.8, 0.5, 0.1, 0.05], steps)
    assert slower["speedup_log2"] == pytest.approx(-faster["speedup_log2"])
    # Both arms are timed to the level 90% of the way down to the worse final.
    assert faster["level_bits"] == pytest.approx(1.0 - 0.9 * (1.0 - 0.05))


def test_the_reference_rule_and_its_two_aggregates() -> None:
    assert steps_below([2.0, 1.9, 1.8, 1.7], 1.85) == 2
    assert steps_below([2.0, 1.9], 1.0) == 2  # never below: the budget
    units = {
        1: {"h_min": 1.0, "sgd": {"loss": [2.0], "final": 1.9}, "em": {"loss": [2.0, 1.85, 1.7]}},
        2: {"h_min": 1.0, "sgd": {"loss": [2.0], "final": 1.8}, "em": {"loss": [2.0, 1.9, 1.75]}},
    }
    for u in units.values():
        u["steps_fast_values"] = steps_below(u["em"]["loss"], u["sgd"]["final"])
    got = sticky_summary({"e12": {"reference": {"steps": 3}}}, units)
    assert got["reference_steps"] == [1.0, 2.0] and got["reference_speedups"] == [3.0, 1.5]
    assert got["reference_steps_script"] == 2.0  # threshold 1.85: steps 2 and 2
    assert got["reference_sgd_covered"] == pytest.approx([0.1, 0.2])


def test_remaining_distance_runs_from_one_to_zero() -> None:
    snaps = {s: {"W_V": torch.tensor([float(s)])} for s in (0, 5, 10)}
    assert remaining(snaps, "values") == pytest.approx([1.0, 0.5, 0.0])


def test_e12_smoke_reports_every_arm(tmp_path) -> None:
    config = {**E12.configs["smoke"], "device": "cpu"}
    outcome = E12.run(config, tmp_path)
    for criterion in E12.rule.criteria:
        (value,) = outcome.samples[criterion.number]
        assert math.isfinite(value)
    n = outcome.numbers
    assert n["reference_seeds"] == [42] and 0 < n["reference_steps"][0] <= 20
    assert 0 <= n["lag_t_kl"] <= config["e12"]["lag"]["steps"]
    titles = [t.title for t in outcome.tables]
    assert any("Reference arm" in t for t in titles)
    assert sum("lag task" in t for t in titles) == 3

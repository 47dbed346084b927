"""The plateau rule and the held-out evaluation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.evaluation import (
    evaluate,
    held_out,
    plateau,
    plateau_tolerance,
    uniform_kl,
)


def test_plateau_compares_the_start_of_the_last_window_with_now() -> None:
    steps = [0, 100, 200, 300, 400, 500]
    # Window: the last 20% of 500 steps starts at 400.
    assert plateau(steps, [2.0, 1.0, 0.5, 0.3, 0.200, 0.197], 0.2, 0.02).converged
    rule = plateau(steps, [2.0, 1.0, 0.5, 0.3, 0.200, 0.190], 0.2, 0.02)
    assert not rule.converged and rule.since == 400
    assert rule.relative_improvement == pytest.approx(0.05)
    # A larger window reaches back to step 200.
    assert plateau(steps, [2.0, 1.0, 0.5, 0.3, 0.2, 0.19], 0.5, 0.02).since == 200
    # Before min_steps, or without an evaluation in the window's past, it is not converged.
    assert not plateau(steps, [1.0] * 6, 0.2, 0.02, min_steps=600).converged
    assert plateau([0], [1.0], 0.2, 0.02).since is None
    assert not plateau([0, 100], [1.0, math.nan], 0.2, 0.02).converged
    # Improvements below 1e-5 bits count as a plateau, whatever their relative size.
    assert plateau(steps, [1.0, 0.1, 1e-3, 1e-5, 4e-6, 1e-6], 0.2, 0.02).converged
    assert not plateau(steps, [1.0, 0.1, 1e-3, 1e-5, 4e-6, 1e-6], 0.2, 0.02, atol=0).converged
    # The best KL so far: a spike at the window's start does not make the run look converged.
    spiky = plateau(steps, [2.0, 1.0, 0.5, 0.3, 0.9, 0.29], 0.2, 0.02)
    assert not spiky.converged and spiky.relative_improvement == pytest.approx(0.01 / 0.3)


def test_the_floor_tolerance_reads_the_improvement_as_a_share_of_the_floor() -> None:
    config = RunConfig(task="bijection", task_params={"n_symbols": 4}, n_test=32)
    floor = uniform_kl(held_out(config))
    assert floor > 0
    assert plateau_tolerance(config, floor) == config.plateau_atol  # off by default
    share = RunConfig(plateau_floor_tol=0.005)
    assert plateau_tolerance(share, 1.0) == pytest.approx(0.005)
    assert plateau_tolerance(share, 1e-6) == share.plateau_atol  # never below plateau_atol
    # 0.0133 -> 0.0104 bits over the window: 22% relative, 0.4% of a 0.69-bit floor.
    steps, kl = [0, 800, 1000], [0.69, 0.0133, 0.0104]
    assert not plateau(steps, kl, 0.2, 0.02).converged
    assert plateau(steps, kl, 0.2, 0.02, atol=plateau_tolerance(share, 0.69)).converged
    assert not plateau(steps, kl, 0.2, 0.02, atol=plateau_tolerance(share, 0.3)).converged
    with pytest.raises(ValueError, match="plateau_floor_tol"):
        RunConfig(plateau_floor_tol=-0.1)


@given(st.lists(st.floats(1e-6, 10.0), min_size=2, max_size=30), st.floats(0.05, 0.95))
def test_plateau_agrees_with_its_definition(kl: list[float], window: float) -> None:
    steps = [10 * i for i in range(len(kl))]
    rule = plateau(steps, kl, window, 0.02, atol=0.0)
    window_start = (1 - window) * steps[-1]
    before = [i for i, s in enumerate(steps[:-1]) if s <= window_start]
    if not before:
        assert rule.since is None and not rule.converged
    else:
        best_then, best_now = min(kl[: before[-1] + 1]), min(kl)
        assert rule.since == steps[before[-1]]
        assert rule.converged == ((best_then - best_now) / best_then < 0.02)


def test_evaluation_reports_kl_entropy_error_and_the_sigmoid_sum() -> None:
    config = RunConfig(
        task="dice",
        task_params={"n_faces": 3, "length": 5},
        n_layer=1,
        n_head=2,
        n_embd=8,
        n_test=16,
    )
    test = held_out(config)
    assert torch.equal(test.tokens, held_out(config).tokens)  # fixed
    model = build_model(config, config.make_task())
    with torch.no_grad():
        for p in model.head.parameters():
            p.zero_()  # every logit 0: q uniform; sigma(0) = 1/2 per answer
    ce, sig = evaluate(model, test, "ce"), evaluate(model, test, "sigmoid")
    assert ce["sigma_sum_gap"] is None and sig["sigma_sum_gap"] == pytest.approx(0.5)
    assert ce["kl_bits"] == pytest.approx(sig["kl_bits"]) and ce["kl_bits"] > 0
    # Uniform predictions: their KL is the uniform floor, log2 K - H(p) averaged.
    assert ce["kl_bits"] == pytest.approx(ce["uniform_kl_bits"])
    h = -(test.posterior * test.posterior.log2()).nan_to_num().sum(-1)[test.mask]
    assert ce["uniform_kl_bits"] == pytest.approx(float((math.log2(3) - h).mean()))

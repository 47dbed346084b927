"""The plateau rule and the held-out evaluation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.evaluation import (
    evaluate,
    held_out,
    plateau,
    plateau_tolerance,
    uniform_kl,
)


def test_plateau_compares_the_mean_of_the_last_window_with_the_one_before() -> None:
    steps = [0, 100, 200, 300, 400, 500]
    # Windows of 20% of 500 steps: the last is (400, 500], the one before (300, 400].
    assert plateau(steps, [2.0, 1.0, 0.5, 0.3, 0.200, 0.197], 0.2, 0.02).converged
    rule = plateau(steps, [2.0, 1.0, 0.5, 0.3, 0.200, 0.190], 0.2, 0.02)
    assert not rule.converged and rule.since == 400
    assert rule.relative_improvement == pytest.approx(0.05)
    # Windows of 40%: (300, 500] (mean 0.195) against (100, 300] (mean 0.4).
    wide = plateau(steps, [2.0, 1.0, 0.5, 0.3, 0.2, 0.19], 0.4, 0.02)
    assert wide.since == 300 and wide.relative_improvement == pytest.approx(1 - 0.195 / 0.4)
    # Before min_steps, or without an evaluation in the window before, it is not converged.
    assert not plateau(steps, [1.0] * 6, 0.2, 0.02, min_steps=600).converged
    assert plateau([0], [1.0], 0.2, 0.02).since is None
    assert not plateau([0, 100], [1.0, math.nan], 0.2, 0.02).converged
    # Improvements below 1e-5 bits count as a plateau, whatever their relative size.
    assert plateau(steps, [1.0, 0.1, 1e-3, 1e-5, 4e-6, 1e-6], 0.2, 0.02).converged
    assert not plateau(steps, [1.0, 0.1, 1e-3, 1e-5, 4e-6, 1e-6], 0.2, 0.02, atol=0).converged
    # Fluctuation around a level is a plateau; a lucky low draw in the last window alone is not
    # a decline of the mean.
    noisy = [0, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500]
    level = [1.0, 0.5, 0.3, 0.2, 0.1, 0.1, 0.12, 0.09, 0.11, 0.1, 0.11]
    assert plateau(noisy, level, 0.2, 0.02).converged
    falling = [1.0, 0.5, 0.3, 0.2, 0.1, 0.1, 0.12, 0.11, 0.1, 0.09, 0.085]
    assert not plateau(noisy, falling, 0.2, 0.02).converged


@given(st.lists(st.floats(1e-6, 10.0), min_size=2, max_size=30), st.floats(0.05, 0.45))
@example([1.0, 1.0, 1.0, 6.0, 1.0, 5.0], 0.4)  # a step on the lower bound, in float arithmetic
def test_plateau_agrees_with_its_definition(kl: list[float], window: float) -> None:
    steps = [10 * i for i in range(len(kl))]
    rule = plateau(steps, kl, window, 0.02, atol=0.0)
    end = steps[-1]
    start = (1 - window) * end  # the bounds as the definition computes them, so that
    lower = start - window * end  # a step at a bound falls on the same side in both
    last = [k for s, k in zip(steps, kl, strict=True) if s > start]
    before = [k for s, k in zip(steps, kl, strict=True) if lower < s <= start]
    if not before:
        assert rule.relative_improvement is None and not rule.converged
    else:
        a, b = sum(before) / len(before), sum(last) / len(last)
        assert rule.converged == ((a - b) / a < 0.02)


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

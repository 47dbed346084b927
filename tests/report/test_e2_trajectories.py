"""E2's two step-size-free measures on paths whose answer is known by construction."""

from __future__ import annotations

import math

import torch

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.parameters import Mixture
from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.experiments import e2_trajectories as e2


def _at(x: float, y: float) -> Mixture:
    """One full-covariance component at (x, y), unit covariance."""
    return Mixture.from_covariances(
        covariance_model("full"),
        torch.ones(1, dtype=torch.float64),
        torch.tensor([[x, y]], dtype=torch.float64),
        torch.eye(2, dtype=torch.float64)[None],
    )


def test_path_gap_is_the_distance_off_the_reference_curve_over_the_reach():
    reference = [_at(0.0, 0.0), _at(2.0, 0.0), _at(4.0, 0.0)]
    slower = [_at(0.0, 0.0), _at(0.5, 0.0), _at(1.0, 0.0), _at(3.0, 0.0)]
    assert e2.path_gap(slower, [reference]) == 0.0
    off = [_at(0.0, 0.0), _at(1.0, 0.3), _at(2.0, 0.0)]
    assert math.isclose(e2.path_gap(off, [reference]), 0.3 / math.hypot(2.0, 0.0))
    # the smallest gap over the references is kept
    bent = [_at(0.0, 0.0), _at(1.0, 0.3), _at(2.0, 0.0), _at(4.0, 0.0)]
    assert e2.path_gap(off, [reference, bent]) == 0.0


def test_em_at_a_fraction_of_its_step_leaves_no_step_residual():
    data = mx.synthetic(200, 0)
    start = mx.poor_start(data, 0)
    damped = e2.planted_path(start, data.x, 5, e2.em_fraction(1 / 3), 0)
    assert max(e2.step_residuals(damped, data.x)) < 1e-12
    pushed = e2.planted_path(start, data.x, 5, e2.offset_em_step, 0)
    assert min(e2.step_residuals(pushed, data.x)) > 0.05

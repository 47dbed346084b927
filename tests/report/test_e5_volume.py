"""E5: EM's optimum planted as a start, and the measurements its controls read."""

from __future__ import annotations

import pytest

from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.experiments import e5_volume as e5


def test_em_fit_as_a_start_reproduces_ems_log_likelihood():
    data = mx.synthetic(300, seed=0)
    fitted, optimum = e5.em_fit(data, e5.random_rows(data, 0))
    model = e5.Components(fitted)
    assert model.gaussian_log_likelihood(data.x.float()) == pytest.approx(optimum, abs=1e-4)


def test_measurements_on_hand_made_trainings():
    curves = {"gaussian_log_likelihood": [-4.0, -3.0005], "max_share": [0.4, 0.9]}
    healthy = {"curves": curves, "alarms": [], "diverged": None}
    collapsed = {
        "curves": {"gaussian_log_likelihood": [-4.0, -9.0], "max_share": [0.4, 0.5]},
        "alarms": ["shrinking_scale"],
        "diverged": None,
    }
    assert e5.alarmed(healthy) == 0.0 and e5.alarmed(collapsed) == 1.0
    assert e5.reaches(healthy, -3.0, 1e-3) == 1.0
    assert e5.reaches(collapsed, -3.0, 1e-3) == 0.0
    assert e5.reaches({**healthy, "diverged": 5}, -3.0, 1e-3) == 0.0
    assert e5.takeover(healthy, collapsed) == pytest.approx(0.4)

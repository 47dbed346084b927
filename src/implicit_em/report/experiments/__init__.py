"""The experiments of the claims report, one module each, listed explicitly in `EXPERIMENTS`.

To add one: write `eN_name.py` defining `EXPERIMENT = Experiment(...)` and add it below.
"""

from implicit_em.report.experiments import (
    e1_identities,
    e2_trajectories,
    e3_fixed_points,
    e4_competition,
    e5_volume,
    e6_volume_collapse,
    e7_competition,
    e8_open_set,
    e9_moe_gates,
    e10_windtunnel_bayes,
    e11_windtunnel_sigmoid,
    e12_two_timescales,
    e13_score_gradients,
    e14_distance_reading,
    e15_conditions,
    e16_partial_clamps,
)

EXPERIMENTS = [
    e1_identities.EXPERIMENT,
    e2_trajectories.EXPERIMENT,
    e3_fixed_points.EXPERIMENT,
    e4_competition.EXPERIMENT,
    e5_volume.EXPERIMENT,
    e6_volume_collapse.EXPERIMENT,
    e7_competition.EXPERIMENT,
    e8_open_set.EXPERIMENT,
    e9_moe_gates.EXPERIMENT,
    e10_windtunnel_bayes.EXPERIMENT,
    e11_windtunnel_sigmoid.EXPERIMENT,
    e12_two_timescales.EXPERIMENT,
    e13_score_gradients.EXPERIMENT,
    e14_distance_reading.EXPERIMENT,
    e15_conditions.EXPERIMENT,
    e16_partial_clamps.EXPERIMENT,
]

__all__ = ["EXPERIMENTS"]

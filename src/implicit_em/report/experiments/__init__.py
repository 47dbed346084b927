"""The experiments of the claims report, one module each, listed explicitly in `MODULES`.

To add one: write `eN_name.py` defining `EXPERIMENT = Experiment(...)` and add its module name
below. This package imports nothing: the registry (`implicit_em.report.running.registry.select`)
loads the listed modules when asked, so that importing one experiment's helper module (as a
worker computing a unit does) imports nothing else, and the registry, which every experiment
module imports, is not imported back by the list.
"""

MODULES = (
    "e1_identities",
    "e2_trajectories",
    "e3_fixed_points",
    "e4_competition",
    "e5_volume",
    "e6_volume_collapse",
    "e7_competition",
    "e8_open_set",
    "e9_moe_gates",
    "e10_windtunnel_bayes",
    "e11_windtunnel_sigmoid",
    "e12_two_timescales",
    "e13_score_gradients",
    "e14_distance_reading",
    "e15_conditions",
    "e16_partial_clamps",
    "e17_attention_posterior",
    "e18_closed_world",
    "e19_residual_collapse",
    "e20_collapse_events",
)

__all__ = ["MODULES"]

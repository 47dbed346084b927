"""The experiments of the claims report, one module each; importing this package registers them.

To add one: write `eN_name.py` that calls `implicit_em.report.register`, and import it here.
"""

from implicit_em.report.experiments import e1_identities  # noqa: F401
from implicit_em.report.experiments import e2_trajectories  # noqa: F401
from implicit_em.report.experiments import e3_fixed_points  # noqa: F401
from implicit_em.report.experiments import e4_competition  # noqa: F401
from implicit_em.report.experiments import e5_volume  # noqa: F401
from implicit_em.report.experiments import e6_volume_collapse  # noqa: F401
from implicit_em.report.experiments import e7_competition  # noqa: F401
from implicit_em.report.experiments import e8_open_set  # noqa: F401
from implicit_em.report.experiments import e9_moe_gates  # noqa: F401
from implicit_em.report.experiments import e10_windtunnel_bayes  # noqa: F401
from implicit_em.report.experiments import e11_windtunnel_sigmoid  # noqa: F401
from implicit_em.report.experiments import e12_two_timescales  # noqa: F401

"""E4's gain from one cluster when the one-cluster start already covers every cluster.

On wine, seed 81004's start (every prototype drawn from the rows of one cultivar) lies within
half a separation of all three centres: no cluster is left to gain, so the share gained is
undefined. The third run stopped there on a division by zero; the gain is now NaN on such a seed,
E4's samples keep it (a criterion that reads it is undecided) and its notes count such seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from implicit_em.report.experiments import _kernel_sweep as ks
from implicit_em.report.experiments import e4_competition as e4
from implicit_em.report.experiments._clusters import gain_one_cluster, gain_share, variants, wine_2d
from implicit_em.report.experiments._competition import coverage, one_cluster_start

SEED = 81004
CONFIG = {
    "steps": 5,
    "lr": 0.025,
    "bandwidth_fraction": 0.2,
    "student_t_dof": 1.0,
    "background_weight": 0.1,
    "sweep_widths": [0.2],
    "sweep_outlier_shares": [0.1],
    "sweep_outlier_radius": 1.5,
    "fit_bound": 0.25,
    "pull_margin": 0.05,
    "gain_ceiling": 0.25,
    "gain_floor": 0.5,
}


def test_the_wine_start_of_the_crashed_seed_covers_every_cluster() -> None:
    data = wine_2d()
    k = len(data.centres)
    start = one_cluster_start(data.x, data.labels, k, SEED)
    assert coverage(start, data.centres, data.separation / 2) == k


def test_the_share_gained_is_undefined_only_when_nothing_is_left_to_gain() -> None:
    assert math.isnan(gain_share(before=3, after=3, k=3))
    assert gain_share(before=1, after=3, k=3) == 1.0
    assert gain_share(before=1, after=2, k=3) == 0.5
    assert gain_share(before=2, after=1, k=3) == -1.0
    with pytest.raises(ValueError, match="before"):
        gain_share(before=4, after=3, k=3)


def test_a_start_that_covers_everything_reads_nan_not_a_crash() -> None:
    data = wine_2d()
    lse = variants(CONFIG)["lse"][0]
    assert math.isnan(gain_one_cluster(lse, data, SEED, CONFIG))
    swept = ks.sweep(data, SEED, CONFIG, ("lse", "correntropy"))
    assert all(
        math.isnan(g) for f in ("lse", "correntropy") for row in swept[f]["gain"] for g in row
    )
    assert all(math.isfinite(p) for row in swept["lse"]["pull"] for p in row)


def test_cell_shares_leave_a_seed_without_a_gain_undefined_for_the_gain_flags_alone() -> None:
    grid = np.ones((1, 1))
    unit = {
        "lse": {"fit": [0.05], "pull": grid * 0.3, "gain": grid * math.nan},
        "correntropy": {"fit": [0.05], "pull": grid * 0.0, "gain": grid * math.nan},
    }
    shares = ks.cell_shares([unit], CONFIG)
    assert shares["robust"] == [1.0]
    assert math.isnan(shares["no_competition"][0]) and math.isnan(shares["both"][0])


def test_e4_counts_the_undefined_seeds_and_keeps_them_in_its_samples() -> None:
    samples = {"lse_gain_one_cluster": [0.5, 1.0, math.nan, 1.0], "pull": [0.1, 0.2, 0.3, 0.4]}
    assert e4.undefined_counts(samples) == {"lse_gain_one_cluster": 1, "pull": 0}

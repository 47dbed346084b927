"""E4's map for C7: the batched objectives, the batched training and the cell readings."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em import objectives
from implicit_em.report.experiments import _kernel_sweep as ks
from implicit_em.report.experiments._clusters import Variant, four_blobs, loss
from implicit_em.report.experiments._heavy_tailed import student_t_nll

CONFIG = {
    "steps": 15,
    "lr": 0.05,
    "student_t_dof": 1.0,
    "sweep_widths": [0.1, 0.3],
    "sweep_outlier_shares": [0.05, 0.2],
    "sweep_outlier_radius": 1.5,
    "fit_bound": 0.25,
    "pull_margin": 0.05,
    "gain_ceiling": 0.25,
    "gain_floor": 0.5,
}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_squared_distances_match_cdist(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(7, 2, generator=g, dtype=torch.float64)
    prototypes = 3 * torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    expected = torch.stack([torch.cdist(x, p) ** 2 for p in prototypes])
    torch.testing.assert_close(ks.squared_distances(x, prototypes), expected)


def test_batched_losses_are_the_library_objectives() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 2, generator=g, dtype=torch.float64)
    prototypes = torch.randn(2, 3, 2, generator=g, dtype=torch.float64)
    widths = torch.tensor([0.5, 2.0], dtype=torch.float64)
    squared = ks.squared_distances(x, prototypes)
    for v, s in enumerate(widths.tolist()):
        sq = torch.cdist(x, prototypes[v]) ** 2
        lse = objectives.mixture_nll(sq / (2 * s**2))
        corr = objectives.correntropy(sq.sqrt(), sigma=s * math.sqrt(2))
        t = student_t_nll(x, prototypes[v], s, 1.0)
        torch.testing.assert_close(ks.batched_loss("lse", squared, widths, 1.0)[v], lse)
        torch.testing.assert_close(ks.batched_loss("correntropy", squared, widths, 1.0)[v], corr)
        torch.testing.assert_close(ks.batched_loss("student_t", squared, widths, 1.0)[v], t)


def test_training_the_models_together_equals_training_each_alone() -> None:
    """Equal to float32 rounding: the models' batched matmul sums in another order than one
    model's on some CPUs (AMD EPYC), so the pulls (about 1e-6 of the separation) move by 1e-8."""
    data = four_blobs(60, 3)
    together = ks.sweep(data, 3, CONFIG, ("lse", "correntropy"))
    alone = ks.sweep(data, 3, CONFIG, ("correntropy",))
    for what in ("fit", "pull", "gain"):
        np.testing.assert_allclose(
            together["correntropy"][what], alone["correntropy"][what], rtol=1e-5, atol=1e-6
        )


def _unit(lse_pull: float, rival_pull: float, lse_gain: float, rival_gain: float, fit: float):
    grid = np.ones((2, 2))
    return {
        "lse": {"fit": [0.05, 0.05], "pull": grid * lse_pull, "gain": grid * lse_gain},
        "correntropy": {"fit": [fit, 0.05], "pull": grid * rival_pull, "gain": grid * rival_gain},
    }


def test_cells_count_only_where_both_fit_and_flags_read_the_contrasts() -> None:
    units = [_unit(0.3, 0.0, 1.0, 0.0, fit=0.5), _unit(0.3, 0.0, 1.0, 0.0, fit=0.5)]
    valid = ks.valid_cells(units, CONFIG, "correntropy")
    assert valid.tolist() == [[False, True], [False, True]]
    assert ks.cell_shares(units, CONFIG) == {
        "robust": [1.0, 1.0],
        "no_competition": [1.0, 1.0],
        "both": [1.0, 1.0],
    }
    pulled_alike = [_unit(0.3, 0.28, 1.0, 0.0, fit=0.05)]
    assert ks.cell_shares(pulled_alike, CONFIG)["robust"] == [0.0]
    assert ks.cell_shares(pulled_alike, CONFIG)["no_competition"] == [1.0]
    competing = [_unit(0.3, 0.0, 1.0, 0.6, fit=0.05)]
    assert ks.cell_shares(competing, CONFIG)["both"] == [0.0]
    unfit = [_unit(0.3, 0.0, 1.0, 0.0, fit=0.5)]
    unfit[0]["lse"]["fit"] = [0.5, 0.5]
    assert all(math.isnan(v) for v in ks.cell_shares(unfit, CONFIG)["both"])


def test_the_one_scale_correntropy_is_the_swept_one() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 2, generator=g)
    prototypes = torch.randn(4, 2, generator=g)
    delta, fraction = 2.0, 0.3
    rival = Variant("correntropy", "correntropy", fraction)
    one = loss(rival, x, prototypes, delta, torch.zeros(2, 2), {})
    swept = ks.batched_loss(
        "correntropy",
        ks.squared_distances(x, prototypes[None]),
        torch.tensor([fraction * delta]),
        1.0,
    )
    torch.testing.assert_close(one, swept[0])

"""The normalized heavy-tailed rivals of E4 against their published densities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal, multivariate_t

from implicit_em.report.experiments import _heavy_tailed as ht


def test_student_t_mixture_is_the_t_density_up_to_a_constant() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 2)) * 3
    prototypes = np.array([[0.0, 1.0], [2.0, -1.0], [-3.0, 0.5]])
    scale, dof = 0.8, 1.5
    density = np.mean(
        [multivariate_t(m, scale**2 * np.eye(2), df=dof).pdf(x) for m in prototypes], axis=0
    )
    got = ht.student_t_nll(torch.tensor(x), torch.tensor(prototypes), scale, dof)
    per_row = -np.log(density)
    # The distances leave out the t density's constant and the equal weights' log K.
    constant = per_row.mean() - float(got)
    rows = [
        float(ht.student_t_nll(torch.tensor(x[i : i + 1]), torch.tensor(prototypes), scale, dof))
        for i in range(7)
    ]
    np.testing.assert_allclose(np.array(rows) + constant, per_row, rtol=1e-10)


def test_background_mixture_is_the_noise_component_density() -> None:
    x = np.array([[0.0, 0.0], [1.0, 2.0], [4.0, -1.0], [-2.0, 3.0]])
    prototypes = np.array([[0.0, 0.5], [3.0, 0.0]])
    scale, weight = 0.7, 0.2
    volume = np.prod(x.max(0) - x.min(0))
    gauss = np.mean(
        [multivariate_normal(m, scale**2 * np.eye(2)).pdf(x) for m in prototypes], axis=0
    )
    expected = -np.log((1 - weight) * gauss + weight / volume).mean()
    box = ht.bounding_box(torch.tensor(x))
    got = ht.background_nll(torch.tensor(x), torch.tensor(prototypes), scale, weight, box)
    assert float(got) == pytest.approx(expected, rel=1e-10)


def test_far_points_go_to_the_background_and_barely_pull_the_t_components() -> None:
    prototypes = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    far = torch.tensor([[0.5, 0.5], [-0.5, -0.5], [50.0, 0.0]], dtype=torch.float64)
    box = ht.bounding_box(far)
    d = ht.background_distances(far, prototypes, 1.0, 0.1, box)
    r = torch.softmax(-d.detach(), dim=-1)
    assert float(r[2, -1]) > 1 - 1e-12 and float(r[0, -1]) < 0.1
    (pull,) = torch.autograd.grad(ht.student_t_nll(far[2:], prototypes, 1.0, 1.0), prototypes)
    (near,) = torch.autograd.grad(ht.student_t_nll(far[:1], prototypes, 1.0, 1.0), prototypes)
    assert pull.norm() < 0.1 * near.norm()


def test_bad_scales_are_refused() -> None:
    x = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="scale and dof"):
        ht.student_t_distances(x, x, 0.0, 1.0)
    with pytest.raises(ValueError, match="weight"):
        ht.background_distances(x, x, 1.0, 1.0, ht.bounding_box(torch.eye(2)))

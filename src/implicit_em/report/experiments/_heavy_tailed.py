r"""Normalized heavy-tailed mixture objectives: robust, yet with responsibilities (E4's rivals).

Correntropy differs from the Gaussian mixture NLL in two ways at once: it has no partition
function (no competition), and its loss is bounded (a far point's pull vanishes). These two
objectives keep the normalization and change the tails, so that robustness can be told apart
from the absence of normalization. Both are mixtures with equal weights over isotropic
components of scale $s$ around the prototypes $\mu_j$ in $\mathbb{R}^p$, written as
distances $d_j$ for [implicit_em.objectives.mixture_nll][] (up to constants that do not depend
on the prototypes):

* **Student-t mixture** (Peel & McLachlan 2000), $\nu$ degrees of freedom:
  $\log t_\nu(x;\mu_j,s^2 I) = c - \tfrac{\nu+p}{2}\log\bigl(1 + \lVert x-\mu_j\rVert^2/(\nu s^2)\bigr)$,
  so $d_j = \tfrac{\nu+p}{2}\log\bigl(1 + \lVert x-\mu_j\rVert^2/(\nu s^2)\bigr)$. A point's pull
  on $\mu_j$ is $r_j(\nu+p)(x-\mu_j)/(\nu s^2 + \lVert x-\mu_j\rVert^2)$: it falls off as
  $1/\lVert x-\mu_j\rVert$.
* **Gaussian mixture with a uniform background** (the noise component of Banfield & Raftery
  1993): $p(x) = (1-\beta)\tfrac1K\sum_j \mathcal N(x;\mu_j,s^2I) + \beta/V$, with $V$ the
  volume of the rows' bounding box. The background is a null component
  ([implicit_em.objectives.append_null][]) at the constant distance
  $d_0 = \log V - \log\beta$ beside $d_j = \lVert x-\mu_j\rVert^2/(2s^2) + \tfrac p2\log(2\pi
  s^2) - \log\tfrac{1-\beta}{K}$; a far point's responsibility goes to the background.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from implicit_em.distances import squared_euclidean
from implicit_em.objectives import append_null, mixture_nll

__all__ = [
    "background_distances",
    "background_log_density",
    "background_nll",
    "bounding_box",
    "student_t_distances",
    "student_t_nll",
]


def student_t_distances(x: Tensor, prototypes: Tensor, scale: float, dof: float) -> Tensor:
    """The Student-t components' distances $d_j$ `[N, K]` (see the module docstring)."""
    if scale <= 0 or dof <= 0:
        raise ValueError(f"scale and dof must be > 0, got scale={scale}, dof={dof}")
    p = x.shape[-1]
    squared = squared_euclidean(x, prototypes)
    return 0.5 * (dof + p) * torch.log1p(squared / (dof * scale**2))


def background_distances(
    x: Tensor, prototypes: Tensor, scale: float, weight: float, box: Tensor
) -> Tensor:
    """The Gaussian components' distances and the background's, `[N, K + 1]` (background
    last), for the rows `x[N, p]` and a bounding box `box[2, p]` (lower and upper corners)."""
    if scale <= 0 or not 0 < weight < 1:
        raise ValueError(f"need scale > 0 and 0 < weight < 1, got scale={scale}, weight={weight}")
    k, p = prototypes.shape
    squared = squared_euclidean(x, prototypes)
    d = (
        squared / (2 * scale**2)
        + 0.5 * p * math.log(2 * math.pi * scale**2)
        - math.log((1 - weight) / k)
    )
    return append_null(d, -background_log_density(box, weight))


def background_log_density(box: Tensor, weight: float) -> float:
    r"""$\log(\beta / V)$ for the bounding box `box[2, p]`."""
    return math.log(weight) - float(torch.log(box[1] - box[0]).sum())


def bounding_box(x: Tensor) -> Tensor:
    """The lower and upper corners of the rows `x[N, p]`, `[2, p]`."""
    return torch.stack([x.amin(0), x.amax(0)])


def student_t_nll(x: Tensor, prototypes: Tensor, scale: float, dof: float) -> Tensor:
    """Mean negative log-likelihood of the equal-weight Student-t mixture, up to a constant."""
    return mixture_nll(student_t_distances(x, prototypes, scale, dof))


def background_nll(
    x: Tensor, prototypes: Tensor, scale: float, weight: float, box: Tensor
) -> Tensor:
    """Mean negative log-likelihood of the Gaussian mixture with a uniform background over
    `box` (which must hold the rows), every constant included (the weights are in the
    distances)."""
    return mixture_nll(background_distances(x, prototypes, scale, weight, box))

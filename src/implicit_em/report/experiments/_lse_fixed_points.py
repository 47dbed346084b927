r"""T3 on the paper's own objective: log-sum-exp over distances, without a volume term.

The objective is the mean over the data of

$$
\ell(\mu) = -\log\sum_j e^{-d_{tj}}, \qquad d_{tj} = \frac{\lVert x_t - \mu_j\rVert^2}{2s^2},
$$

with learnable means $\mu_j$ and a fixed, shared bandwidth $s$: no $\log|\det W_j|$ and no
mixing weights (with a learnable scale and no volume term there is no fixed point at all: the
scale runs to zero, E5). Its gradient is
$\partial\ell/\partial\mu_j = -\frac{1}{N s^2}\sum_t r_{tj}(x_t - \mu_j)$ with
$r_t = \operatorname{softmax}(-d_t)$, so its stationary points are exactly the fixed points of
the EM map $\mu_j \leftarrow \sum_t r_{tj} x_t / \sum_t r_{tj}$ (a mixture of equal, fixed
spherical Gaussians). Gradient descent with step $\eta = s^2$ moves each mean the fraction
$N_j/N$ of the way to EM's target (Xu and Jordan's preconditioner), so both maps share their
fixed points but not their paths: from one start they may reach different fixed points.

From each start, EM and gradient descent each run until their update (EM) or gradient (GD)
falls below a tolerance; the gradient-descent end is then classified as EM's end from the same
start (`same`), another stationary point (`other`, with its objective compared with EM's), or
not stationary within the budget (`not stationary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from implicit_em.core import responsibilities
from implicit_em.distances import squared_euclidean
from implicit_em.objectives import mixture_nll

__all__ = [
    "FixedPoint",
    "compare_from_start",
    "em_fixed_point",
    "gd_fixed_point",
    "landing",
    "lse_gradient",
    "lse_objective",
    "matched_difference",
]


@dataclass(frozen=True)
class FixedPoint:
    """Where a run ended: the means, the passes taken, and whether it met its tolerance."""

    means: Tensor
    passes: int
    converged: bool


def _distances(x: Tensor, means: Tensor, bandwidth: float) -> Tensor:
    return squared_euclidean(x, means) / (2.0 * bandwidth**2)


def lse_objective(x: Tensor, means: Tensor, bandwidth: float) -> float:
    r"""$\frac1N\sum_t -\log\sum_j e^{-d_{tj}}$ (the mixture NLL with no volume and no weights)."""
    return float(mixture_nll(_distances(x, means, bandwidth)))


def lse_gradient(x: Tensor, means: Tensor, bandwidth: float) -> Tensor:
    r"""$\partial\ell/\partial\mu_j = -\frac{1}{N s^2}\sum_t r_{tj}(x_t - \mu_j)$, `[K, D]`."""
    r = responsibilities(_distances(x, means, bandwidth))
    return -(r.T @ x - r.sum(0)[:, None] * means) / (len(x) * bandwidth**2)


def em_fixed_point(
    x: Tensor, start: Tensor, bandwidth: float, tolerance: float, max_passes: int
) -> FixedPoint:
    """EM from `start` until the largest change of a mean is below `tolerance`.

    A component with no responsibility left keeps its mean (it has no EM target)."""
    means = start.clone()
    for passes in range(1, max_passes + 1):
        r = responsibilities(_distances(x, means, bandwidth))
        mass = r.sum(0)
        target = torch.where(mass[:, None] > 0, r.T @ x / mass.clamp_min(1e-300)[:, None], means)
        step = float((target - means).abs().max())
        means = target
        if step < tolerance:
            return FixedPoint(means, passes, True)
    return FixedPoint(means, max_passes, False)


def gd_fixed_point(
    x: Tensor,
    start: Tensor,
    bandwidth: float,
    tolerance: float,
    max_passes: int,
    learning_rate: float | None = None,
) -> FixedPoint:
    """Full-batch gradient descent from `start` (step `learning_rate`, default $s^2$) until the
    gradient's largest entry, scaled by $s^2$ (a distance in the data's units), is below
    `tolerance`."""
    lr = bandwidth**2 if learning_rate is None else learning_rate
    means = start.clone()
    for passes in range(1, max_passes + 1):
        grad = lse_gradient(x, means, bandwidth)
        if float(grad.abs().max()) * bandwidth**2 < tolerance:
            return FixedPoint(means, passes - 1, True)
        means = means - lr * grad
    grad = lse_gradient(x, means, bandwidth)
    return FixedPoint(means, max_passes, float(grad.abs().max()) * bandwidth**2 < tolerance)


def matched_difference(a: Tensor, b: Tensor) -> float:
    """Largest coordinate difference of the means `a` and `b` after matching (Hungarian)."""
    rows, cols = linear_sum_assignment(torch.cdist(a, b).numpy())
    return float((a[rows] - b[cols]).abs().max())


def compare_from_start(
    x: Tensor,
    start: Tensor,
    bandwidth: float,
    tolerance: float,
    max_passes: int,
    same_means: float,
) -> dict[str, float | str]:
    """EM and gradient descent from one start; where gradient descent landed against EM
    (`landing`)."""
    em = em_fixed_point(x, start, bandwidth, tolerance, max_passes)
    gd = gd_fixed_point(x, start, bandwidth, tolerance, max_passes)
    return landing(x, em, gd, bandwidth, same_means)


def landing(
    x: Tensor, em: FixedPoint, gd: FixedPoint, bandwidth: float, same_means: float
) -> dict[str, float | str]:
    """Where gradient descent's end `gd` lies against EM's end `em`.

    Returns `landed` (`same`, `other` or `not stationary`), `same` (1.0 or 0.0), the matched
    difference of the means, both objectives and both pass counts, whether EM converged, and
    the gradient at EM's end (`em_gradient`: its largest entry times $s^2$, in the data's
    units; zero at a fixed point of the EM map, which is a stationary point of the objective).
    """
    difference = matched_difference(gd.means, em.means)
    if not gd.converged:
        landed = "not stationary"
    elif difference <= same_means:
        landed = "same"
    else:
        landed = "other"
    return {
        "landed": landed,
        "same": float(landed == "same"),
        "difference": difference,
        "em_objective": lse_objective(x, em.means, bandwidth),
        "gd_objective": lse_objective(x, gd.means, bandwidth),
        "em_passes": float(em.passes),
        "gd_passes": float(gd.passes),
        "em_converged": float(em.converged),
        "em_gradient": float(lse_gradient(x, em.means, bandwidth).abs().max()) * bandwidth**2,
    }

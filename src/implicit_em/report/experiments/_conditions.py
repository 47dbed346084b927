r"""C3's five arms: the softmax objective with everything, and with one condition removed at a time.

The model is the same in every arm: $K$ prototypes $\mu_j$ in the data space, distances
$d_{tj} = \lVert x_t - \mu_j\rVert^2 / 2s^2$ at a fixed bandwidth $s$, trained by full-batch
gradient descent on the mean over the data of a per-point objective $\ell_t(d_t)$:

* `softmax` (all three conditions): $\ell = -\log\sum_j e^{-d_j}$, so
  $\partial\ell/\partial d_j = r_j = \operatorname{softmax}(-d)_j$;
* `sparsemax` (normalization without the exponential; Martins and Astudillo, 2016):
  $\ell = -\Omega^*(-d)$ with $\Omega^*(z) = \max_{p\in\Delta}\langle p, z\rangle - \tfrac12\lVert
  p\rVert^2 = \langle p, z\rangle - \tfrac12\lVert p\rVert^2$ at $p = \operatorname{sparsemax}(z)$,
  so $\partial\ell/\partial d_j = \operatorname{sparsemax}(-d)_j$: weights that sum to one but
  come from a Euclidean projection onto the simplex, not from $e^{-d}$ (`entmax.sparsemax`);
* `unnormalized` (the exponential without its normalizer): $\ell = -\sum_j e^{-d_j}$, so
  $\partial\ell/\partial d_j = e^{-d_j}$, each component on its own;
* `straight_through` (a non-differentiable distance): the softmax objective on the distances
  rounded to whole units, $\tilde d = \operatorname{round}(d)$, a step function whose derivative
  is zero almost everywhere; gradient descent trains through the straight-through estimator
  ($\partial\tilde d/\partial d := 1$, Bengio et al., 2013);
* `gradient_free` (no gradient training): the softmax objective itself, fitted by Powell's
  derivative-free method (`scipy.optimize.minimize`) on the $2K$ prototype coordinates. Budget
  rule: as many objective evaluations as two per gradient step of the other arms (a gradient
  step costs one forward and one backward pass, each about one evaluation).

Whether the responsibilities survive is read from what they do: from a start with every
prototype in one cluster, competition for the data (weights that sum to one over components)
pulls prototypes out to the other clusters; components that do not compete each climb to the
nearest mode and stay. `coverage` is the share of the true clusters that own a prototype.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import minimize
from torch import Tensor

__all__ = [
    "ARMS",
    "EVALUATIONS_PER_STEP",
    "OBJECTIVES",
    "clusters",
    "collapsed_start",
    "coverage",
    "mean_objective",
    "train",
]


def _softmax(d: Tensor) -> Tensor:
    return -torch.logsumexp(-d, dim=-1)


def _sparsemax(d: Tensor) -> Tensor:
    # `entmax` is in the report extra; imported here so that the package imports without it.
    from entmax import sparsemax

    p = sparsemax(-d, dim=-1)
    return -((p * -d).sum(-1) - 0.5 * (p * p).sum(-1))


def _unnormalized(d: Tensor) -> Tensor:
    return -torch.exp(-d).sum(-1)


def _straight_through(d: Tensor) -> Tensor:
    rounded = d + (torch.round(d) - d).detach()
    return _softmax(rounded)


OBJECTIVES: dict[str, Callable[[Tensor], Tensor]] = {
    "softmax": _softmax,
    "sparsemax": _sparsemax,
    "unnormalized": _unnormalized,
    "straight_through": _straight_through,
    "gradient_free": _softmax,
}
"""Per-point objective `ell(d[N, K]) -> [N]` of each arm (minimized)."""

ARMS = tuple(OBJECTIVES)

EVALUATIONS_PER_STEP = 2
"""The gradient-free arm's budget: objective evaluations per gradient step of the other arms."""

CENTRES = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0], [4.0, 4.0]], dtype=torch.float64)
"""The four true cluster centres (2-D, 4 units apart)."""


def clusters(n: int, seed: int, spread: float) -> Tensor:
    """`n` points, equally many per cluster of `CENTRES`, isotropic noise of std `spread`."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % len(CENTRES)
    noise = torch.randn(n, 2, generator=generator, dtype=torch.float64)
    return CENTRES[labels] + spread * noise


def collapsed_start(x: Tensor, k: int, seed: int, jitter: float) -> Tensor:
    """Every prototype at one random data point, jittered by `jitter` (std): all in one cluster."""
    generator = torch.Generator().manual_seed(seed)
    row = torch.randint(0, len(x), (1,), generator=generator)
    return x[row] + jitter * torch.randn(k, x.shape[1], generator=generator, dtype=x.dtype)


def mean_objective(arm: str, x: Tensor, means: Tensor, bandwidth: float) -> float:
    """The mean over the rows of `arm`'s objective at the prototypes `means`: what it minimizes."""
    d = torch.cdist(x, means) ** 2 / (2.0 * bandwidth**2)
    return float(OBJECTIVES[arm](d).mean())


def train(
    arm: str, x: Tensor, start: Tensor, bandwidth: float, learning_rate: float, steps: int
) -> Tensor:
    """`steps` full-batch gradient steps on the mean of `arm`'s objective; the end prototypes.
    The `gradient_free` arm instead takes `EVALUATIONS_PER_STEP * steps` evaluations of Powell's
    method (none when `learning_rate` is 0, the frozen arm)."""
    if arm == "gradient_free":
        budget = EVALUATIONS_PER_STEP * steps if learning_rate > 0 else 0
        return _powell(x, start, bandwidth, budget)
    objective = OBJECTIVES[arm]
    means = start.clone().requires_grad_(True)
    for _ in range(steps):
        d = torch.cdist(x, means) ** 2 / (2.0 * bandwidth**2)
        (grad,) = torch.autograd.grad(objective(d).mean(), means)
        with torch.no_grad():
            means -= learning_rate * grad
    return means.detach()


def _powell(x: Tensor, start: Tensor, bandwidth: float, evaluations: int) -> Tensor:
    """The softmax objective minimized over the flattened prototypes by Powell's method, within
    `evaluations` objective evaluations; the start itself when there are none."""
    if evaluations == 0:
        return start.clone()

    def value(flat: np.ndarray) -> float:
        means = torch.from_numpy(flat).reshape(start.shape).to(x.dtype)
        return mean_objective("softmax", x, means, bandwidth)

    fitted = minimize(
        value, start.numpy().ravel(), method="Powell", options={"maxfev": evaluations}
    )
    return torch.from_numpy(fitted.x).reshape(start.shape).to(start.dtype)


def coverage(means: Tensor, centres: Tensor = CENTRES) -> float:
    """Share of the `centres` that are the nearest centre of at least one prototype."""
    owners = torch.cdist(means, centres).argmin(dim=1)
    return len(set(owners.tolist())) / len(centres)

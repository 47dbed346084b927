r"""How many of a prototype head's components a trained network uses: E19's collapse measures.

All read the responsibilities $r[N, K]$ of $N$ held-out inputs ($r_{ik} = \mathrm{softmax}(-d_i)_k$,
rows summing to one) through their mean $\bar r_k = \frac1N\sum_i r_{ik}$, each component's share
of the data:

* `effective_components`: $\exp H(\bar r)$, between 1 (one component takes every input) and
  $K$ (every component an equal share);
* `distinct_components`: $\exp\big(H(\bar r) - \frac1N\sum_i H(r_i)\big)$, the exponential of
  the mutual information between input and component. It equals `effective_components` when
  every input is assigned to one component, and falls to 1 when every input spreads its
  responsibility alike over the components (prototypes that coincide: a share for each, but no
  component tells inputs apart);
* `dead_share`: the share of components whose mass $\bar r_k$ is below `dead_mass / K`;
* `largest_share`: $\max_k \bar r_k$.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "component_use",
    "dead_share",
    "distinct_components",
    "effective_components",
    "largest_share",
]


def _entropy(p: Tensor) -> Tensor:
    return -torch.special.xlogy(p, p).sum(dim=-1)


def _check(r: Tensor) -> Tensor:
    if r.dim() != 2 or r.shape[0] < 1 or r.shape[1] < 1:
        raise ValueError(f"r must be a non-empty [N, K] tensor, got shape {tuple(r.shape)}")
    r = r.double()
    if (r < 0).any() or not torch.allclose(r.sum(-1), torch.ones(r.shape[0], dtype=r.dtype)):
        raise ValueError("r must hold responsibilities: non-negative rows summing to one")
    return r


def effective_components(r: Tensor) -> float:
    r"""$\exp H(\bar r)$ of responsibilities `r[N, K]`."""
    return float(torch.exp(_entropy(_check(r).mean(0))))


def distinct_components(r: Tensor) -> float:
    r"""$\exp\big(H(\bar r) - \overline{H(r_i)}\big)$ of responsibilities `r[N, K]`."""
    r = _check(r)
    return float(torch.exp(_entropy(r.mean(0)) - _entropy(r).mean()))


def dead_share(r: Tensor, dead_mass: float) -> float:
    r"""The share of the $K$ components with $\bar r_k <$ `dead_mass` $/K$."""
    if not 0 < dead_mass < 1:
        raise ValueError(f"dead_mass must be in (0, 1), got {dead_mass}")
    mass = _check(r).mean(0)
    return float((mass < dead_mass / mass.shape[0]).double().mean())


def largest_share(r: Tensor) -> float:
    r"""$\max_k \bar r_k$ of responsibilities `r[N, K]`."""
    return float(_check(r).mean(0).max())


def component_use(r: Tensor, dead_mass: float) -> dict[str, float]:
    """Every measure above of `r[N, K]`, each effective number also as a share of $K$."""
    k = r.shape[-1]
    effective, distinct = effective_components(r), distinct_components(r)
    out = {
        "effective": effective,
        "effective_share": effective / k,
        "distinct": distinct,
        "distinct_share": distinct / k,
        "dead_share": dead_share(r, dead_mass),
        "largest_share": largest_share(r),
    }
    if not all(math.isfinite(v) for v in out.values()):
        raise ValueError("component use is not finite: responsibilities with NaN")
    return out

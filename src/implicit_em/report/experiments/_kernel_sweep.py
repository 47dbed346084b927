r"""E4's map for C7: correntropy against the Gaussian mixture NLL over kernel widths and outlier shares.

Both objectives use the same kernel at each width $\sigma = w\Delta$ ($\Delta$: the cluster
separation), with $d_{tj} = \lVert x_t-\mu_j\rVert^2 / 2\sigma^2$:

* `lse` (normalized): $\ell_t = -\log\sum_j e^{-d_{tj}}$;
* `correntropy` (no normalization): $\ell_t = \sum_j \bigl(1 - e^{-d_{tj}}\bigr)$;
* `student_t` (a normalized heavy-tailed rival, used by the controls in correntropy's place):
  the equal-weight Student-t mixture in the plane ($p = 2$), $d_{tj} = \tfrac{\nu+p}{2}\log(1 + \lVert x_t-\mu_j\rVert^2
  / \nu\sigma^2)$ inside the same $-\log\sum_j e^{-d_{tj}}$.

Every (width, model) pair is trained at once: the prototypes of all pairs form one tensor
`[V, K, p]` whose loss is the sum of the pairs' mean losses, and Adam's update is elementwise, so
each pair follows exactly the path it would follow alone.

A **cell** is one width and one outlier share (outliers on a ring at a multiple of $\Delta$
around the data's centre). Per cell, data set and seed, for each model:

* **inlier fit**: prototypes trained on the clean rows from $K$ random rows; the mean over the
  prototypes of the distance to the nearest true centre, over $\Delta$ (it does not ask every
  cluster to be covered, which is the competition read below);
* **outlier pull**: the same start trained on the rows plus the cell's outliers; the mean
  distance between the clean and the contaminated prototypes matched one to one, over $\Delta$;
* **gain from one cluster**: every prototype on rows of one cluster, trained on the
  contaminated rows; the share of the clusters not covered at the start that are covered at the
  end (covered: a prototype within $\Delta/2$ of the true centre); undefined (NaN) on a seed
  whose start already covers every cluster (`_clusters.gain_share`).

A cell counts on a data set only where both models fit the inliers there (mean fit over the
seeds below the protocol's bound); in a counted cell correntropy is **more robust** when the
outliers move the mixture's prototypes at least the protocol's margin more than correntropy's,
and shows **no competition** when it gains at most the protocol's ceiling while the mixture
gains at least its floor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from implicit_em.report.experiments._clusters import Clusters, gain_share, with_outliers
from implicit_em.report.experiments._competition import coverage, one_cluster_start

__all__ = [
    "MODELS",
    "batched_loss",
    "cell_flags",
    "cell_shares",
    "squared_distances",
    "sweep",
    "valid_cells",
]

MODELS = ("lse", "correntropy")
"""The two models of the map; the controls may put `student_t` in correntropy's place."""


def squared_distances(x: Tensor, prototypes: Tensor) -> Tensor:
    r"""$\lVert x_t - \mu_{vj}\rVert^2$ `[V, N, K]` for the rows `x[N, p]` and the prototype sets
    `prototypes[V, K, p]` (expanded as $\lVert x\rVert^2 - 2x\cdot\mu + \lVert\mu\rVert^2$,
    clamped at 0)."""
    cross = torch.einsum("np,vkp->vnk", x, prototypes)
    norms = (x * x).sum(-1)[None, :, None] + (prototypes * prototypes).sum(-1)[:, None, :]
    return (norms - 2 * cross).clamp_min(0.0)


def batched_loss(family: str, squared: Tensor, widths: Tensor, dof: float) -> Tensor:
    """The mean loss over the rows of `family` for each of `V` prototype sets, from their squared
    distances `squared[V, N, K]` at the kernel widths `widths[V]` (absolute), `[V]`."""
    scale2 = widths[:, None, None] ** 2
    if family == "lse":
        return -torch.logsumexp(-squared / (2 * scale2), -1).mean(-1)
    if family == "correntropy":
        return (1 - torch.exp(-squared / (2 * scale2))).sum(-1).mean(-1)
    if family == "student_t":
        d = 0.5 * (dof + 2) * torch.log1p(squared / (dof * scale2))
        return -torch.logsumexp(-d, -1).mean(-1)
    raise ValueError(f"family must be one of lse, correntropy, student_t, got {family!r}")


def _train(
    families: tuple[str, ...],
    x: Tensor,
    starts: tuple[Tensor, ...],
    config: dict[str, Any],
    delta: float,
) -> list[dict[str, Tensor]]:
    """Every (start, family, swept width) triple trained `config["steps"]` full-batch Adam steps
    on the rows `x` at once: per start, per family, the end prototypes `[W, K, p]`."""
    widths = config["sweep_widths"]
    n = len(widths)
    blocks = [(start, f) for start in starts for f in families]
    prototypes = torch.cat([start.expand(n, *start.shape) for start, _ in blocks])
    prototypes = prototypes.clone().requires_grad_(True)
    scales = torch.tensor(widths, dtype=x.dtype) * delta
    optimizer = torch.optim.Adam([prototypes], lr=config["lr"] * delta)
    for _ in range(config["steps"]):
        optimizer.zero_grad(set_to_none=True)
        squared = squared_distances(x, prototypes)
        total = sum(
            batched_loss(f, squared[i * n : (i + 1) * n], scales, config["student_t_dof"]).sum()
            for i, (_, f) in enumerate(blocks)
        )
        total.backward()
        optimizer.step()
    ends = prototypes.detach()
    m = len(families)
    return [
        {f: ends[(j * m + i) * n : (j * m + i + 1) * n] for i, f in enumerate(families)}
        for j in range(len(starts))
    ]


def _fit_error(prototypes: Tensor, centres: Tensor, delta: float) -> float:
    """Mean over the prototypes of the distance to the nearest true centre, over `delta`."""
    return float(torch.cdist(prototypes, centres).amin(1).mean()) / delta


def _pull(clean: Tensor, pulled: Tensor, delta: float) -> float:
    """Mean distance between the two prototype sets matched one to one, over `delta`."""
    gap = torch.cdist(clean, pulled)
    rows, cols = linear_sum_assignment(gap.numpy())
    return float(gap[rows, cols].mean()) / delta


def sweep(
    data: Clusters,
    seed: int,
    config: dict[str, Any],
    families: tuple[str, ...] = MODELS,
    cluster: int | None = None,
) -> dict[str, Any]:
    """One data set and seed over the map: per family, `fit[W]`, and `pull[S][W]`,
    `gain[S][W]` over the outlier shares `S` and widths `W` of `config`; the gain starts on the
    rows of `cluster` (or of one drawn with `seed`)."""
    families = tuple(dict.fromkeys(families))
    k, delta = len(data.centres), data.separation
    generator = torch.Generator().manual_seed(seed)
    random_start = data.x[torch.randperm(len(data.x), generator=generator)[:k]]
    collapsed = one_cluster_start(data.x, data.labels, k, seed, cluster=cluster)
    before = coverage(collapsed, data.centres, delta / 2)
    (clean,) = _train(families, data.x, (random_start,), config, delta)
    out: dict[str, Any] = {
        f: {"fit": [_fit_error(m, data.centres, delta) for m in clean[f]], "pull": [], "gain": []}
        for f in families
    }
    for share in config["sweep_outlier_shares"]:
        rows = with_outliers(data, share, config["sweep_outlier_radius"], seed)
        pulled, spread = _train(families, rows, (random_start, collapsed), config, delta)
        for f in families:
            out[f]["pull"].append(
                [_pull(a, b, delta) for a, b in zip(clean[f], pulled[f], strict=True)]
            )
            out[f]["gain"].append(
                [gain_share(before, coverage(m, data.centres, delta / 2), k) for m in spread[f]]
            )
    return out


def valid_cells(units: list[dict[str, Any]], config: dict[str, Any], rival: str) -> np.ndarray:
    """`[S, W]` booleans: the cells where both `lse` and `rival` fit the inliers, their fit
    error's mean over the `units` (seeds) below `config["fit_bound"]` (the fit is read on the
    clean rows, so it is shared by every outlier share of a width)."""
    fits = [np.mean([u[m]["fit"] for u in units], axis=0) for m in ("lse", rival)]
    ok = (fits[0] < config["fit_bound"]) & (fits[1] < config["fit_bound"])
    return np.broadcast_to(ok, (len(config["sweep_outlier_shares"]), len(ok))).copy()


def cell_flags(unit: dict[str, Any], config: dict[str, Any], rival: str) -> dict[str, np.ndarray]:
    """`[S, W]` flags of one seed, 1.0 where it holds and 0.0 where not: `robust` (the
    outliers move `lse` at least the margin more than `rival`), `no_competition` (`rival`
    gains at most the ceiling, `lse` at least the floor) and `both`. The two that read the gain
    are NaN where either gain is undefined (a start that covers every cluster), never 0.0."""
    pull_gap = np.array(unit["lse"]["pull"]) - np.array(unit[rival]["pull"])
    robust = (pull_gap >= config["pull_margin"]).astype(float)
    lse_gain, rival_gain = (np.asarray(unit[m]["gain"], dtype=float) for m in ("lse", rival))
    no_competition = np.where(
        np.isnan(lse_gain) | np.isnan(rival_gain),
        np.nan,
        (rival_gain <= config["gain_ceiling"]) & (lse_gain >= config["gain_floor"]),
    )
    return {"robust": robust, "no_competition": no_competition, "both": robust * no_competition}


def cell_shares(
    units: list[dict[str, Any]], config: dict[str, Any], rival: str = "correntropy"
) -> dict[str, list[float]]:
    """Per seed, the share of the valid cells where each flag holds: `{flag: [one value per
    unit]}`; NaN without a valid cell, and for the gain's flags on a seed whose gain is
    undefined in a valid cell (`cell_flags`)."""
    valid = valid_cells(units, config, rival)
    out: dict[str, list[float]] = {"robust": [], "no_competition": [], "both": []}
    for unit in units:
        for flag, holds in cell_flags(unit, config, rival).items():
            out[flag].append(float(holds[valid].mean()) if valid.any() else float("nan"))
    return out

"""E4's measurements: the data (four blobs, wine in two dimensions), the objectives compared (`Variant`), training from one cluster, the gain of moving out of it and the pull of outliers on the prototypes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score
from torch import Tensor

from implicit_em import objectives
from implicit_em.distances import squared_euclidean
from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.experiments._competition import blobs, coverage, one_cluster_start
from implicit_em.report.experiments._heavy_tailed import (
    background_nll,
    bounding_box,
    student_t_nll,
)

Config = dict[str, Any]


@dataclass(frozen=True)
class Clusters:
    """Rows `x[N, p]` (float32), their cluster labels and the true centres `[K, p]`."""

    x: Tensor
    labels: np.ndarray
    centres: Tensor

    @property
    def separation(self) -> float:
        """$\\Delta$: the smallest distance between two true centres."""
        return float(torch.pdist(self.centres).min())


@dataclass(frozen=True)
class Variant:
    """One objective at one scale: `family` (`gaussian`, `student_t`, `background`, or
    `correntropy`: the Gaussian kernel of the mixture NLL at the same scale, summed over the
    prototypes without the normalisation) and its scale as a fraction of the cluster
    separation."""

    name: str
    family: str
    fraction: float


def wine_2d() -> Clusters:
    """Wine as the mixture experiments use it (PCA 2-D), in float32; the cultivars' means as
    the true centres."""
    data = mx.wine()
    centres = torch.stack([data.x[torch.as_tensor(data.labels == c)].mean(0) for c in range(3)])
    return Clusters(data.x.float(), data.labels, centres.float())


def four_blobs(n: int, seed: int) -> Clusters:
    """Four 2-D blobs (`_competition.blobs`)."""
    return Clusters(*blobs(n, seed))


def variants(config: Config) -> dict[str, list[Variant]]:
    """The objectives compared at one scale, by group: `lse` (the Gaussian mixture NLL) and
    `heavy_tailed` (the two normalized rivals); correntropy is swept over widths in
    `_kernel_sweep`."""
    f = config["bandwidth_fraction"]
    return {
        "lse": [Variant("mixture NLL", "gaussian", f)],
        "heavy_tailed": [
            Variant("Student-t mixture", "student_t", f),
            Variant("mixture + uniform background", "background", f),
        ],
    }


def loss(
    variant: Variant, x: Tensor, prototypes: Tensor, delta: float, box: Tensor, config: Config
) -> Tensor:
    """The mean loss of `variant` over the rows `x`, its scale `variant.fraction * delta`; the
    background component is uniform over `box` (`[2, p]`, lower and upper corners)."""
    scale = variant.fraction * delta
    if variant.family == "gaussian":
        return objectives.mixture_nll(squared_euclidean(x, prototypes) / (2 * scale**2))
    if variant.family == "correntropy":
        return (1 - torch.exp(-squared_euclidean(x, prototypes) / (2 * scale**2))).sum(-1).mean()
    if variant.family == "student_t":
        return student_t_nll(x, prototypes, scale, config["student_t_dof"])
    if variant.family == "background":
        return background_nll(x, prototypes, scale, config["background_weight"], box)
    raise ValueError(f"unknown objective family {variant.family!r}")


def train_from(
    variant: Variant, x: Tensor, start: Tensor, delta: float, box: Tensor, config: Config
) -> Tensor:
    """Prototypes from `start`, trained `config["steps"]` full-batch Adam steps."""
    prototypes = start.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([prototypes], lr=config["lr"] * delta)
    for _ in range(config["steps"]):
        optimizer.zero_grad(set_to_none=True)
        loss(variant, x, prototypes, delta, box, config).backward()
        optimizer.step()
    return prototypes.detach()


def gain_share(before: int, after: int, k: int) -> float:
    """Of the `k - before` clusters not covered at the start, the share covered after training:
    $(\text{after} - \text{before}) / (k - \text{before})$, negative when clusters are lost.

    NaN when the start already covers all `k` (nothing is left to gain, so the share is
    undefined: on wine a start drawn from one cultivar's rows can lie within half a separation
    of every centre); E4 keeps such a seed in its samples, so a criterion that reads it is
    undecided, and counts such seeds in its notes.

    Raises
    ------
    ValueError
        If `before` is not between 0 and `k`.
    """
    if not 0 <= before <= k:
        raise ValueError(f"before: expected a count of covered clusters in [0, {k}], got {before}")
    return math.nan if before == k else (after - before) / (k - before)


def gain_one_cluster(
    variant: Variant, data: Clusters, seed: int, config: Config, cluster: int | None = None
) -> float:
    """Of the clusters not covered at the start, the share covered after training, from every
    prototype on rows of one cluster (`cluster`, or one drawn with `seed`); NaN when the start
    covers every cluster (`gain_share`)."""
    k, delta = len(data.centres), data.separation
    start = one_cluster_start(data.x, data.labels, k, seed, cluster=cluster)
    end = train_from(variant, data.x, start, delta, bounding_box(data.x), config)
    before, after = (coverage(p, data.centres, delta / 2) for p in (start, end))
    return gain_share(before, after, k)


def outlier_pull(
    variant: Variant, data: Clusters, contaminated: Tensor, seed: int, config: Config
) -> dict[str, Any]:
    """From `K` rows drawn with `seed`, prototypes trained on the clean rows and on the
    `contaminated` rows, the same objective in both (a background component is uniform over
    the contaminated rows' bounding box, which holds the clean rows too); `pull`: the mean
    distance between the two sets matched one to one, over the separation. Also the clean
    prototypes' ARI and mean error to the true centres."""
    k, delta = len(data.centres), data.separation
    generator = torch.Generator().manual_seed(seed)
    start = data.x[torch.randperm(len(data.x), generator=generator)[:k]]
    box = bounding_box(contaminated)
    clean = train_from(variant, data.x, start, delta, box, config)
    pulled = train_from(variant, contaminated, start, delta, box, config)
    gap = torch.cdist(clean, pulled)
    rows, cols = linear_sum_assignment(gap.numpy())
    error = torch.cdist(data.centres, clean)
    truth_rows, truth_cols = linear_sum_assignment(error.numpy())
    return {
        "pull": float(gap[rows, cols].mean()) / delta,
        "ari": float(adjusted_rand_score(data.labels, squared_euclidean(data.x, clean).argmin(1))),
        "centre_error": float(error[truth_rows, truth_cols].mean()) / delta,
        "clean": clean.tolist(),
        "contaminated": pulled.tolist(),
    }


def with_outliers(data: Clusters, share: float, radius: float, seed: int) -> Tensor:
    """The rows plus `share * N` points on a circle of `radius * separation` around the data's
    centre."""
    generator = torch.Generator().manual_seed(seed)
    n = round(share * len(data.x))
    angle = 2 * math.pi * torch.rand(n, generator=generator)
    ring = data.x.mean(0) + radius * data.separation * torch.stack([angle.cos(), angle.sin()], 1)
    return torch.cat([data.x, ring])

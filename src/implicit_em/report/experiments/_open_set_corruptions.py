r"""E8's corrupted inputs: known-class test images under registered corruptions, a near
out-of-distribution set beside the held-out classes.

Each corruption acts on the pixels $x \in [0, 1]^{28 \times 28}$ (the centred images plus the
training mean), and the result is clipped to $[0, 1]$ and centred again:

* `noise`: Gaussian noise, $x + s\,\epsilon$, $\epsilon \sim \mathcal N(0, I)$;
* `blur`: a Gaussian blur of standard deviation $s$ pixels (a separable kernel of radius
  $\lceil 3s \rceil$, zero padding);
* `contrast`: $\bar x + s\,(x - \bar x)$ with $\bar x$ the image's mean pixel (as in
  ImageNet-C's contrast).

The severities $s$ are registered in the protocol (`corruptions`), fixed before the run. Per
seed, every known test image gets one corruption drawn at random (uniformly over the registered
kinds), on all of the known test images or a random `n_corrupt` of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from implicit_em.report.experiments._open_set_splits import OpenSetSplit

__all__ = ["CORRUPTIONS", "blur", "contrast", "corrupt", "noise", "with_corruptions"]

SIDE = 28
"""The images' side in pixels."""


def noise(x: Tensor, std: float, generator: torch.Generator) -> Tensor:
    """Pixels `x[N, 784]` in [0, 1] plus Gaussian noise of standard deviation `std`."""
    eps = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
    return x + std * eps


def blur(x: Tensor, sigma: float, generator: torch.Generator) -> Tensor:
    """Pixels `x[N, 784]` blurred by a Gaussian of `sigma` pixels (separable, zero padding)."""
    radius = max(1, math.ceil(3 * sigma))
    offsets = torch.arange(-radius, radius + 1, dtype=x.dtype, device=x.device)
    kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
    kernel = kernel / kernel.sum()
    images = x.reshape(-1, 1, SIDE, SIDE)
    images = torch.nn.functional.conv2d(images, kernel.view(1, 1, 1, -1), padding=(0, radius))
    images = torch.nn.functional.conv2d(images, kernel.view(1, 1, -1, 1), padding=(radius, 0))
    return images.reshape(len(x), -1)


def contrast(x: Tensor, factor: float, generator: torch.Generator) -> Tensor:
    """Pixels `x[N, 784]` pulled toward each image's mean pixel: `mean + factor (x - mean)`."""
    mean = x.mean(1, keepdim=True)
    return mean + factor * (x - mean)


CORRUPTIONS: dict[str, Callable[[Tensor, float, torch.Generator], Tensor]] = {
    "noise": noise,
    "blur": blur,
    "contrast": contrast,
}


def corrupt(x: Tensor, mean: Tensor, severities: Mapping[str, float], seed: int) -> Tensor:
    """Each row of the centred images `x[N, 784]` under one corruption of `severities`
    (kind -> severity), the kind drawn uniformly per row with `seed`; centred by `mean` again.

    Raises
    ------
    ValueError
        If `severities` is empty or names a corruption not in `CORRUPTIONS`.
    """
    unknown = sorted(set(severities) - set(CORRUPTIONS))
    if not severities or unknown:
        raise ValueError(
            f"corruptions must name some of {sorted(CORRUPTIONS)}, got {sorted(severities)}"
        )
    kinds = sorted(severities)
    rng = np.random.default_rng(seed)
    which = torch.from_numpy(rng.integers(len(kinds), size=len(x))).to(x.device)
    generator = torch.Generator().manual_seed(seed)
    pixels = x + mean
    out = pixels.clone()
    for i, kind in enumerate(kinds):
        rows = which == i
        if bool(rows.any()):
            out[rows] = CORRUPTIONS[kind](pixels[rows], float(severities[kind]), generator)
    return out.clamp(0.0, 1.0) - mean


def with_corruptions(
    split: OpenSetSplit,
    mean: Tensor,
    severities: Mapping[str, float],
    seed: int,
    rows: int | None = None,
) -> OpenSetSplit:
    """`split` with its corrupted set: its known test images (a random `rows` of them, drawn
    with `seed`, when given) under `corrupt`."""
    known = split.x_test[split.y_test >= 0]
    if rows is not None and rows < len(known):
        pick = np.sort(np.random.default_rng(seed).choice(len(known), size=rows, replace=False))
        known = known[torch.from_numpy(pick).to(known.device)]
    return replace(split, x_corrupt=corrupt(known, mean, severities, seed))

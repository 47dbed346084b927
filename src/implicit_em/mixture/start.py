r"""The starting mixture of a fit: the settings that decide it and the mixture they give.

By default the initial responsibilities are computed on every row, as scikit-learn computes
them, so that a default fit is scikit-learn's at every size. `init_sample_size` (an
extension, and a departure from scikit-learn) computes them on that many rows drawn at
random instead (see `initialization.initial_sample`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.distributed import broadcast_mixture
from implicit_em.mixture.initialization import (
    check_means,
    check_precisions,
    check_weights,
    initial_sample,
    starting_mixture,
)
from implicit_em.mixture.parameters import Mixture

__all__ = ["StartSettings", "initial_mixture"]


@dataclass(frozen=True)
class StartSettings:
    """The estimator's parameters that decide a starting mixture (`init_sample_size` None:
    every row)."""

    covariance_type: str
    n_components: int
    init_params: str
    reg_covar: float
    weights_init: object = None
    means_init: object = None
    precisions_init: object = None
    init_sample_size: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> StartSettings:
        """The settings among an estimator's `get_params()`."""
        return cls(**{f.name: params[f.name] for f in fields(cls)})


def initial_mixture(
    settings: StartSettings,
    x: object,
    rng: np.random.RandomState,
    dtype: torch.dtype,
    device: torch.device,
) -> Mixture:
    """The M-step of the initial responsibilities (`starting_mixture`), then the user's
    overrides, as `dtype` on `device` (see `initialization`); under a distributed fit, rank
    0's, broadcast (every rank computes it on the same gathered rows)."""
    model = covariance_model(settings.covariance_type)
    k, dim = settings.n_components, x.shape[1]
    weights = None if settings.weights_init is None else check_weights(settings.weights_init, k)
    means = None if settings.means_init is None else check_means(settings.means_init, k, dim)
    precisions = (
        None
        if settings.precisions_init is None
        else check_precisions(settings.precisions_init, model.name, k, dim)
    )
    start = None
    if weights is None or means is None or precisions is None:
        sample = initial_sample(x, rng, settings.init_sample_size)
        start = starting_mixture(model, sample, k, settings.init_params, settings.reg_covar, rng)

    def tensor(value: np.ndarray | None, fallback: Tensor | None) -> Tensor:
        return fallback if value is None else torch.as_tensor(value, dtype=torch.float64)

    covariances = (
        start.covariances
        if precisions is None
        else model.from_precision(torch.as_tensor(precisions, dtype=torch.float64))
    )
    mixture = Mixture.from_covariances(
        model,
        tensor(weights, None if start is None else start.weights),
        tensor(means, None if start is None else start.means),
        covariances,
    )
    return broadcast_mixture(mixture.to(dtype, device))

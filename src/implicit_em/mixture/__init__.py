"""Gaussian mixtures fitted by EM or by gradient descent over one loop (see `estimator`).

* `covariance`: per-covariance-type math, selected by name.
* `parameters`: the parameters and the E-step of a chunk.
* `statistics`: streaming, summable sufficient statistics and the M-step.
* `step_rules`: `em`, `gd`, `adam`, `preconditioned`.
* `reseed`: re-seeding of emptied components.
* `distributed`: all-reduce of the sums under `torch.distributed`.
* `data`: arrays, tensors and DataLoaders in; the input's type out.
"""

from __future__ import annotations

from implicit_em.mixture.estimator import GaussianMixture

__all__ = ["GaussianMixture"]

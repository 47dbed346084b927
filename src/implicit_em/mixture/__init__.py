"""Gaussian mixtures fitted by EM or by gradient descent over one loop (see :mod:`.estimator`).

* :mod:`.covariance`: per-covariance-type math, selected by name.
* :mod:`.parameters`: the parameters and the E-step of a chunk.
* :mod:`.statistics`: streaming, summable sufficient statistics and the M-step.
* :mod:`.step_rules`: ``em``, ``gd``, ``adam``, ``preconditioned``.
* :mod:`.reseed`: re-seeding of emptied components.
* :mod:`.distributed`: all-reduce of the sums under ``torch.distributed``.
* :mod:`.data`: arrays, tensors and DataLoaders in; the input's type out.
"""

from __future__ import annotations

from implicit_em.mixture.estimator import GaussianMixture

__all__ = ["GaussianMixture"]

r"""Objectives over distances: each a pure function plus a thin `nn.Module`.

Every objective takes distances `d` with the component axis at `dim` and is *minimized*.
Its gradient with respect to `d` is stated per sample (before the batch reduction); a `"mean"`
reduction divides it by the number of samples.

| objective           | per-sample loss                               | $\partial/\partial d_j$                          |
| ------------------- | --------------------------------------------- | ------------------------------------------------ |
| [mixture_nll][]     | $-\log\sum_j \pi_j e^{-d_j + v_j}$            | $+r_j$                                           |
| [cross_entropy][]   | $d_y + \log\sum_k e^{-d_k}$                   | $t_j - r_j$                                      |
| [correntropy][]     | $\sum_j 1 - e^{-d_j^2/\sigma^2}$              | $\tfrac{2d_j}{\sigma^2}e^{-d_j^2/\sigma^2}$      |
| [sigmoid_bce][]     | $\sum_j \mathrm{BCE}(\sigma(-d_j), t_j)$      | $t_j - \sigma(-d_j)$                             |
| [clamped_nll][]     | $-\log\sum_j w_j e^{-d_j} + \log\sum_k e^{-d_k}$ | $\tilde r_j - r_j$                          |

Normalized objectives (the first two) couple the components through $r$; the
unnormalized comparators (the last two) have a diagonal Hessian in `d`: no competition, no
responsibility (claims C7, C8). [append_null][] adds a "none of the above" component that
works with both normalized objectives, and [variance_penalty][] /
[decorrelation_penalty][] are the batch surrogates of the missing log-det volume term (C9).
The partial clamps ([clamped_nll][] and its cases [candidate_set_nll][], [soft_label_nll][],
[transition_nll][], [crowd_nll][]) treat imperfect supervision as a weight $w$ over the classes:
the gradient is the clamped minus the free responsibilities (C14b).

One module per family: `mixture`, `classification`, `null`, `unnormalized`, `volume` and
`partial_clamp`; every name is importable from this package.

Examples
--------
>>> import torch
>>> from implicit_em import objectives, responsibilities
>>> d = torch.rand(4, 3, requires_grad=True)
>>> (grad,) = torch.autograd.grad(objectives.mixture_nll(d, reduction="sum"), d)
>>> torch.allclose(grad, responsibilities(d.detach()))
True
"""

from __future__ import annotations

from implicit_em.objectives._reduction import Reduction
from implicit_em.objectives.classification import CrossEntropy, cross_entropy, soft_targets
from implicit_em.objectives.mixture import MixtureNLL, mixture_nll
from implicit_em.objectives.null import NullComponent, append_null, null_responsibility
from implicit_em.objectives.partial_clamp import (
    CandidateSetNLL,
    CrowdNLL,
    SoftLabelNLL,
    TransitionNLL,
    candidate_set_nll,
    clamped_nll,
    clamped_responsibilities,
    crowd_log_weights,
    crowd_nll,
    soft_label_nll,
    transition_nll,
)
from implicit_em.objectives.unnormalized import (
    CorrentropyLoss,
    SigmoidBCE,
    correntropy,
    sigmoid_bce,
)
from implicit_em.objectives.volume import (
    VolumeSurrogate,
    decorrelation_penalty,
    log_det_penalty,
    variance_penalty,
)

__all__ = [
    "CandidateSetNLL",
    "CorrentropyLoss",
    "CrossEntropy",
    "CrowdNLL",
    "MixtureNLL",
    "NullComponent",
    "Reduction",
    "SigmoidBCE",
    "SoftLabelNLL",
    "TransitionNLL",
    "VolumeSurrogate",
    "append_null",
    "candidate_set_nll",
    "clamped_nll",
    "clamped_responsibilities",
    "correntropy",
    "cross_entropy",
    "crowd_log_weights",
    "crowd_nll",
    "decorrelation_penalty",
    "log_det_penalty",
    "mixture_nll",
    "null_responsibility",
    "sigmoid_bce",
    "soft_label_nll",
    "soft_targets",
    "transition_nll",
    "variance_penalty",
]

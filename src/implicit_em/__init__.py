r"""implicit-em: gradient descent as implicit EM in distance-based models.

For $L = \log \sum_j \exp(-d_j)$, $\partial L/\partial d_j = -r_j$ with $r = \operatorname{softmax}(-d)$:
every gradient step on a log-sum-exp objective over distances is a responsibility-weighted
(EM-like) update. This package makes that fact executable ([identities][implicit_em.identities]),
usable ([objectives][implicit_em.objectives], [distances][implicit_em.distances],
[attention][implicit_em.attention], [mixture][implicit_em.mixture]), observable in training
([trace][implicit_em.trace]) and testable ([windtunnel][implicit_em.windtunnel]).

The package exports the core's three functions ([lse][implicit_em.core.lse],
[responsibilities][implicit_em.core.responsibilities],
[log_responsibilities][implicit_em.core.log_responsibilities]) and its light submodules; the
heavier subpackages `mixture`, `trace`, `windtunnel` and `plot` load on first use
(`implicit_em.trace` after `import implicit_em` works).

Examples
--------
>>> import torch
>>> import implicit_em as iem
>>> d = torch.tensor([0.0, 1.0])
>>> iem.responsibilities(d)
tensor([0.7311, 0.2689])
>>> iem.lse(d)
tensor(0.3133)
"""

from __future__ import annotations

import importlib
from typing import Any

from implicit_em import attention, distances, identities, objectives
from implicit_em.core import log_responsibilities, lse, responsibilities

__version__ = "0.1.0"
"""The package version (the same as the distribution's)."""

__all__ = [
    "__version__",
    "attention",
    "distances",
    "identities",
    "log_responsibilities",
    "lse",
    "objectives",
    "responsibilities",
]

# Heavier subpackages load on first use: `iem.mixture`, `iem.trace`, `iem.windtunnel`, `iem.plot`.
_LAZY = ("mixture", "trace", "windtunnel", "plot")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"implicit_em.{name}")
    raise AttributeError(f"module 'implicit_em' has no attribute {name!r}")

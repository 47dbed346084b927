"""implicit-em: gradient descent as implicit EM in distance-based models.

For L = log sum_j exp(-d_j), dL/dd_j = -r_j with r = softmax(-d): every gradient step on a
log-sum-exp objective over distances is a responsibility-weighted (EM-like) update. This package
makes that fact executable (``identities``), usable (``objectives``, ``distances``,
``attention``, ``mixture``), observable in training (``trace``) and testable (``windtunnel``).
"""

from __future__ import annotations

import importlib
from typing import Any

from implicit_em import attention, distances, identities, objectives
from implicit_em.core import log_responsibilities, lse, responsibilities

__version__ = "0.1.0"

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

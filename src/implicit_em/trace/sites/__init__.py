"""The site kinds the tracer recognizes: one module each, one line each in `KINDS`.

See `implicit_em.trace.sites.base` for what a kind declares.
"""

from __future__ import annotations

from implicit_em.trace.sites.base import Kept, SiteKind
from implicit_em.trace.sites.cross_entropy import CrossEntropy
from implicit_em.trace.sites.distance_cross_entropy import DistanceCrossEntropy
from implicit_em.trace.sites.eager import EagerAttention
from implicit_em.trace.sites.mha import MultiheadAttention
from implicit_em.trace.sites.mixture_nll import MixtureNLL
from implicit_em.trace.sites.router import Router
from implicit_em.trace.sites.sdpa import SDPA

__all__ = ["KINDS", "SEARCHED", "Kept", "SiteKind"]

KINDS: tuple[SiteKind, ...] = (
    CrossEntropy(),
    SDPA(),
    MultiheadAttention(),
    EagerAttention(),
    MixtureNLL(),
    DistanceCrossEntropy(),
    Router(),
)
"""Every site kind, in the order in which they are searched."""

SEARCHED: tuple[str, ...] = tuple(kind.searched for kind in KINDS)
"""What the tracer looks for (named in `NoSiteError`)."""

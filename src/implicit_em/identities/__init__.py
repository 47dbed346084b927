r"""Executable identities: each fact the theory rests on, checked against autograd.

Each [Identity][] names the paper section and the claim or objection IDs it checks (C are the
paper's claims, R the referee's objections; the theory page, `docs/theory.md`, lists them),
computes a closed form and the same quantity by autograd in float64 on random inputs, and reports
the largest absolute difference. Where a function of the package is involved it is also passed
through `torch.autograd.gradcheck`. `implicit-em verify` runs the registry and prints one line per
identity; an identity passes when its error is at most `TOLERANCE` ($10^{-12}$) and gradcheck
succeeded.

The package has one module per job: `registry` (the records, `register`, `run`, `run_all` and the
shared numeric helpers), `gradients` (the gradient of each objective, of attention and of the
mixture and volume terms) and `normalization` (the null component, no competition without
normalization, the partial clamps). Importing the check modules registers their identities, in
the order listed.

Examples
--------
>>> from implicit_em.identities import REGISTRY, run_all
>>> REGISTRY["lse_gradient"].statement
'dL/dd_j = -r_j for L = log sum_j exp(-d_j)'
>>> results = run_all(seed=0, names=["nll_gradient", "xu_jordan_means"])
>>> [(result.name, result.passed) for result in results]
[('nll_gradient', True), ('xu_jordan_means', True)]
"""

from __future__ import annotations

# Importing the check modules registers their identities, in this order.
from implicit_em.identities import gradients, normalization  # noqa: F401
from implicit_em.identities.registry import (  # noqa: F401  (DTYPE and TOLERANCE, not in __all__)
    DTYPE,
    REGISTRY,
    TOLERANCE,
    Identity,
    IdentityResult,
    register,
    run,
    run_all,
)

__all__ = ["REGISTRY", "Identity", "IdentityResult", "register", "run", "run_all"]

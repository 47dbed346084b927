"""The registry of identities: the records, `register`, `run` / `run_all`, and the numeric
helpers the checks share (float64 draws, the largest error, gradcheck, autograd gradients).

A check is a function `check(generator) -> (max_abs_error, gradcheck_ok)`; [register][] adds it
to [REGISTRY][] under its name, and the order of registration is the order `run_all` and
`implicit-em verify` report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

DTYPE = torch.float64
TOLERANCE = 1e-12


@dataclass(frozen=True)
class IdentityResult:
    """The outcome of checking one identity (a row of `implicit-em verify`).

    Attributes
    ----------
    name : str
        The identity's name in [REGISTRY][].
    section : str
        The paper section, e.g. `"§3.1"`.
    claims : str
        The claim and objection IDs it checks, e.g. `"C6, R4"`.
    statement : str
        The identity in one line of plain text.
    max_abs_error : float
        The largest absolute difference between the closed form and autograd.
    gradcheck : bool
        Whether `torch.autograd.gradcheck` succeeded (True where it does not apply).
    passed : bool
        `max_abs_error <= tolerance and gradcheck`.
    """

    name: str
    section: str
    claims: str
    statement: str
    max_abs_error: float
    gradcheck: bool
    passed: bool

    def as_dict(self) -> dict[str, object]:
        """The fields as a dict (what `implicit-em verify --json` prints)."""
        return asdict(self)


@dataclass(frozen=True)
class Identity:
    """A closed form and its autograd check, as registered by [register][].

    Attributes
    ----------
    name, section, claims, statement : str
        As in [IdentityResult][].
    check : Callable[[torch.Generator], tuple[float, bool]]
        `check(generator)` draws its inputs from `generator` and returns
        `(max_abs_error, gradcheck_ok)`.
    tolerance : float
        The identity passes when the error is at most this and gradcheck succeeded.
    """

    name: str
    section: str
    claims: str
    statement: str
    check: Callable[[torch.Generator], tuple[float, bool]]
    tolerance: float = TOLERANCE


REGISTRY: dict[str, Identity] = {}
"""Every identity by name, in registration order (the order `implicit-em verify` prints)."""


def register(name: str, section: str, claims: str, statement: str) -> Callable:
    """Decorator adding a check function to [REGISTRY][] under `name`.

    Parameters
    ----------
    name : str
        A new name.
    section : str
        The paper section.
    claims : str
        The claim and objection IDs it checks.
    statement : str
        The identity in one line.

    Returns
    -------
    Callable
        A decorator that registers a function `check(generator) -> (max_abs_error, gradcheck_ok)`
        and returns it unchanged.

    Raises
    ------
    ValueError
        When the decorator is applied, if `name` is already registered.
    """

    def wrap(check: Callable[[torch.Generator], tuple[float, bool]]) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"identity {name!r} is already registered")
        REGISTRY[name] = Identity(name, section, claims, statement, check)
        return check

    return wrap


def randn(generator: torch.Generator, *shape: int) -> Tensor:
    """Standard normal draws of `shape` in float64 (`DTYPE`) from `generator`."""
    return torch.randn(*shape, generator=generator, dtype=DTYPE)


def max_error(*pairs: tuple[Tensor, Tensor]) -> float:
    """The largest |a - b| over every pair `(a, b)` of same-shaped tensors."""
    return max(float((a - b).abs().max()) for a, b in pairs)


def passes_gradcheck(fn: Callable[..., Tensor], *inputs: Tensor) -> bool:
    """Whether `torch.autograd.gradcheck` accepts `fn` at fresh float64 leaf copies of `inputs`."""
    leaves = tuple(t.detach().clone().requires_grad_(True) for t in inputs)
    return bool(torch.autograd.gradcheck(fn, leaves, raise_exception=False))


def gradients_of(output: Tensor, inputs: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """d(output)/d(input) for each of `inputs` (one tensor or a tuple), by autograd."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return torch.autograd.grad(output, inputs)


def run(identity: Identity, seed: int = 0) -> IdentityResult:
    """Check one identity with a generator seeded by `seed`.

    Parameters
    ----------
    identity : Identity
        The identity, e.g. `REGISTRY["lse_gradient"]`.
    seed : int, default=0
        Seed of its random inputs.

    Returns
    -------
    IdentityResult
        The error, the gradcheck outcome and the verdict.
    """
    generator = torch.Generator().manual_seed(seed)
    error, gradcheck_ok = identity.check(generator)
    return IdentityResult(
        name=identity.name,
        section=identity.section,
        claims=identity.claims,
        statement=identity.statement,
        max_abs_error=error,
        gradcheck=gradcheck_ok,
        passed=bool(error <= identity.tolerance and gradcheck_ok),
    )


def run_all(seed: int = 0, names: list[str] | None = None) -> list[IdentityResult]:
    """Check every registered identity, or those in `names`, in registration order.

    Parameters
    ----------
    seed : int, default=0
        Seed of the random inputs of each identity.
    names : list of str or None, default=None
        The identities to check; all when None.

    Returns
    -------
    list of IdentityResult
        One result per identity.

    Raises
    ------
    ValueError
        If a name is not in [REGISTRY][].
    """
    if names is not None:
        unknown = sorted(set(names) - set(REGISTRY))
        if unknown:
            raise ValueError(f"unknown identities {unknown}; known: {sorted(REGISTRY)}")
    selected = [REGISTRY[n] for n in (names or REGISTRY)]
    return [run(identity, seed) for identity in selected]

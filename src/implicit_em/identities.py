r"""Executable identities: each fact the theory rests on, checked against autograd.

Each [Identity][] names the paper section and the claim or objection IDs it checks (C are the
paper's claims, R the referee's objections; the theory page, `docs/theory.md`, lists them),
computes a closed form and the same quantity by autograd in float64 on random inputs, and reports
the largest absolute difference. Where a function of the package is involved it is also passed
through `torch.autograd.gradcheck`. `implicit-em verify` runs the registry and prints one line per
identity; an identity passes when its error is at most `TOLERANCE` ($10^{-12}$) and gradcheck
succeeded.

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

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from implicit_em.attention import attention, attention_gradients
from implicit_em.core import lse, responsibilities
from implicit_em.objectives import (
    append_null,
    candidate_set_nll,
    correntropy,
    cross_entropy,
    crowd_nll,
    mixture_nll,
    null_responsibility,
    sigmoid_bce,
    soft_label_nll,
    soft_targets,
    transition_nll,
)

__all__ = ["REGISTRY", "Identity", "IdentityResult", "register", "run", "run_all"]

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


def _randn(generator: torch.Generator, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=generator, dtype=DTYPE)


def _max_error(*pairs: tuple[Tensor, Tensor]) -> float:
    return max(float((a - b).abs().max()) for a, b in pairs)


def _gradcheck(fn: Callable[..., Tensor], *inputs: Tensor) -> bool:
    leaves = tuple(t.detach().clone().requires_grad_(True) for t in inputs)
    return bool(torch.autograd.gradcheck(fn, leaves, raise_exception=False))


def _grad(output: Tensor, inputs: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return torch.autograd.grad(output, inputs)


# ---------------------------------------------------------------------------------------------
# 1-3: the three signs
# ---------------------------------------------------------------------------------------------


@register("lse_gradient", "§3.1", "C1", "dL/dd_j = -r_j for L = log sum_j exp(-d_j)")
def _lse_gradient(gen: torch.Generator) -> tuple[float, bool]:
    d = (3 * _randn(gen, 6, 5)).requires_grad_(True)
    (grad,) = _grad(lse(d).sum(), d)
    error = _max_error((grad, -responsibilities(d.detach())))
    return error, _gradcheck(lse, d)


@register("nll_gradient", "§3.1", "R4", "d/dd_j [-log sum_j exp(-d_j)] = +r_j")
def _nll_gradient(gen: torch.Generator) -> tuple[float, bool]:
    d = (3 * _randn(gen, 6, 5)).requires_grad_(True)
    log_prior = torch.log_softmax(_randn(gen, 5), dim=-1)
    (grad,) = _grad(mixture_nll(d, reduction="sum"), d)
    (grad_prior,) = _grad(mixture_nll(d, log_prior=log_prior, reduction="sum"), d)
    error = _max_error(
        (grad, responsibilities(d.detach())),
        (grad_prior, responsibilities(d.detach(), log_prior)),
    )
    ok = _gradcheck(lambda x: mixture_nll(x, log_prior=log_prior, reduction="none"), d)
    return error, ok


@register(
    "cross_entropy_gradient",
    "§4.3",
    "C6, R4",
    "d/dd_j [d_y + log sum_k exp(-d_k)] = 1[j=y] - r_j; soft targets: t_j - r_j",
)
def _cross_entropy_gradient(gen: torch.Generator) -> tuple[float, bool]:
    d = (3 * _randn(gen, 8, 6)).requires_grad_(True)
    y = torch.randint(0, 6, (8,), generator=gen)
    t = torch.softmax(_randn(gen, 8, 6), dim=-1)
    r = responsibilities(d.detach())
    (grad_hard,) = _grad(cross_entropy(d, y, reduction="sum"), d)
    (grad_soft,) = _grad(cross_entropy(d, t, reduction="sum"), d)
    (grad_smooth,) = _grad(cross_entropy(d, y, label_smoothing=0.1, reduction="sum"), d)
    onehot = torch.nn.functional.one_hot(y, 6).to(DTYPE)
    error = _max_error(
        (grad_hard, onehot - r),
        (grad_soft, t - r),
        (grad_smooth, soft_targets(d.detach(), y, 0.1) - r),
    )
    ok = _gradcheck(lambda x: cross_entropy(x, t, reduction="none"), d) and _gradcheck(
        lambda x: cross_entropy(x, y, label_smoothing=0.1, reduction="none"), d
    )
    return error, ok


# ---------------------------------------------------------------------------------------------
# 4-6: attention, the conditional regime
# ---------------------------------------------------------------------------------------------


def _qkvg(gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    q, k, v = _randn(gen, 2, 5, 4), _randn(gen, 2, 7, 4), _randn(gen, 2, 7, 3)
    return q, k, v, _randn(gen, 2, 5, 3)


@register("attention_values", "§4.2", "C5, R2", "dL/dv_j = sum_i alpha_ij g_i")
def _attention_values(gen: torch.Generator) -> tuple[float, bool]:
    q, k, v, g = _qkvg(gen)
    v = v.requires_grad_(True)
    out, _ = attention(q, k, v)
    (grad_v,) = _grad((out * g).sum(), v)
    closed = attention_gradients(q, k, v.detach(), g)
    ok = _gradcheck(lambda vv: attention(q, k, vv)[0], v)
    return _max_error((grad_v, closed.values)), ok


@register(
    "attention_scores",
    "§4.2",
    "C5, R2",
    "dL/ds_ij = alpha_ij (a_ij - abar_i), a_ij = g_i.v_j (the advantage law)",
)
def _attention_scores(gen: torch.Generator) -> tuple[float, bool]:
    q, k, v, g = _qkvg(gen)
    scale = q.shape[-1] ** -0.5
    s = ((q @ k.transpose(-2, -1)) * scale).requires_grad_(True)
    out = responsibilities(-s) @ v
    (grad_s,) = _grad((out * g).sum(), s)
    q_, k_ = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    grad_q, grad_k = _grad((attention(q_, k_, v)[0] * g).sum(), (q_, k_))
    closed = attention_gradients(q, k, v, g)
    error = _max_error((grad_s, closed.scores), (grad_q, closed.queries), (grad_k, closed.keys))
    ok = _gradcheck(lambda qq, kk: attention(qq, kk, v)[0], q, k)
    return error, ok


@register(
    "hopfield_query",
    "§4.2",
    "C5",
    "d/dq log sum_j exp(q.k_j) = sum_j alpha_j k_j (retrieval)",
)
def _hopfield_query(gen: torch.Generator) -> tuple[float, bool]:
    q, keys = _randn(gen, 3, 4).requires_grad_(True), _randn(gen, 9, 4)

    def energy(qq: Tensor) -> Tensor:
        return lse(-(qq @ keys.T))

    (grad_q,) = _grad(energy(q).sum(), q)
    alpha = responsibilities(-(q.detach() @ keys.T))
    return _max_error((grad_q, alpha @ keys)), _gradcheck(energy, q)


# ---------------------------------------------------------------------------------------------
# 7-8: Gaussian mixtures, the unsupervised regime
# ---------------------------------------------------------------------------------------------


def _gaussian_log_joint(x: Tensor, means: Tensor, chol: Tensor, log_weights: Tensor) -> Tensor:
    """log pi_j + log N(x_t | mu_j, Sigma_j) for Sigma_j = chol_j chol_j^T, shape [N, K]."""
    diff = x.unsqueeze(1) - means  # [N, K, D]
    sol = torch.linalg.solve_triangular(chol, diff.unsqueeze(-1), upper=False).squeeze(-1)
    log_det = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    d = x.shape[-1]
    return (
        log_weights
        - 0.5 * (sol**2).sum(-1)
        - log_det
        - 0.5 * d * torch.log(torch.tensor(2 * torch.pi, dtype=x.dtype))
    )


@register(
    "xu_jordan_means",
    "§4.1",
    "R1, T2",
    "EM mean update = mu_j + (Sigma_j / N_j) d(log-lik)/dmu_j (Xu & Jordan 1996)",
)
def _xu_jordan(gen: torch.Generator) -> tuple[float, bool]:
    n, k, dim = 40, 3, 2
    x = _randn(gen, n, dim)
    means = _randn(gen, k, dim).requires_grad_(True)
    a = 0.3 * _randn(gen, k, dim, dim)
    cov = a @ a.transpose(-2, -1) + torch.eye(dim, dtype=DTYPE)
    chol = torch.linalg.cholesky(cov)
    log_weights = torch.log_softmax(_randn(gen, k), dim=-1)

    def log_likelihood(mu: Tensor) -> Tensor:
        return lse(-_gaussian_log_joint(x, mu, chol, log_weights))

    (grad,) = _grad(log_likelihood(means).sum(), means)
    r = responsibilities(-_gaussian_log_joint(x, means.detach(), chol, log_weights))
    n_j = r.sum(0)
    em = (r.T @ x) / n_j[:, None]
    preconditioned = means.detach() + torch.einsum("kde,ke->kd", cov, grad) / n_j[:, None]
    return _max_error((preconditioned, em)), _gradcheck(log_likelihood, means)


@register(
    "volume_gradient",
    "§6.2",
    "C9, m1",
    "e_j = 1/2|W_j x + b_j|^2 - log|det W_j|: dL/dW_j = r_j (W_j^-T - z_j x^T)",
)
def _volume_gradient(gen: torch.Generator) -> tuple[float, bool]:
    k, dim = 3, 4
    x = _randn(gen, dim)
    w = (torch.eye(dim, dtype=DTYPE) + 0.3 * _randn(gen, k, dim, dim)).requires_grad_(True)
    b = _randn(gen, k, dim)

    def objective(ww: Tensor) -> Tensor:
        z = ww @ x + b
        energy = 0.5 * (z**2).sum(-1) - torch.linalg.slogdet(ww).logabsdet
        return lse(energy)

    (grad,) = _grad(objective(w), w)
    with torch.no_grad():
        z = w @ x + b
        energy = 0.5 * (z**2).sum(-1) - torch.linalg.slogdet(w).logabsdet
        r = responsibilities(energy)
        closed = r[:, None, None] * (
            torch.linalg.inv(w).transpose(-2, -1) - z.unsqueeze(-1) * x.unsqueeze(-2)
        )
    return _max_error((grad, closed)), _gradcheck(objective, w)


# ---------------------------------------------------------------------------------------------
# 9-10: the null component, and no competition without normalization
# ---------------------------------------------------------------------------------------------


@register(
    "null_component",
    "§7.3",
    "C10, C14c",
    "r_0 = sigmoid(-d_0 - L); d/dd_0 = +r_0 (mixture NLL), 1[y=null] - r_0 (cross-entropy)",
)
def _null_component(gen: torch.Generator) -> tuple[float, bool]:
    d = 2 * _randn(gen, 6, 4)
    d0 = torch.tensor(0.7, dtype=DTYPE, requires_grad=True)
    y = torch.tensor([0, 4, 2, 4, 1, 3])  # 4 = K: "none of the above"
    r0 = null_responsibility(d, d0.detach())
    r_ext = responsibilities(append_null(d, d0.detach()))
    (grad_nll,) = _grad(mixture_nll(append_null(d, d0), reduction="sum"), d0)
    (grad_ce,) = _grad(cross_entropy(append_null(d, d0), y, reduction="sum"), d0)
    error = _max_error(
        (r0, r_ext[:, -1]),
        (grad_nll, r0.sum()),
        (grad_ce, ((y == 4).to(DTYPE) - r0).sum()),
    )
    ok = _gradcheck(lambda dd, z: cross_entropy(append_null(dd, z), y, reduction="none"), d, d0)
    return error, ok


@register(
    "null_orders_as_energy",
    "§7.3",
    "C14c",
    "constant d_0: r_0 = sigmoid(E - d_0), E = -log sum_j exp(-d_j): r_0 ranks inputs as E",
)
def _null_orders_as_energy(gen: torch.Generator) -> tuple[float, bool]:
    """A threshold null component adds nothing to the energy score: with the same `d_0` for
    every input, r_0 is a strictly increasing function of the energy E, dr_0/dE = r_0 (1 - r_0)
    > 0, so every ranking of inputs by r_0 (and any AUROC read from it) is the energy's. The
    error is the largest of |r_0 - sigmoid(E - d_0)|, |dr_0/dE - r_0(1 - r_0)| and the share of
    input pairs that r_0 and E order differently."""
    d = 3 * _randn(gen, 64, 5)
    d0 = 0.4
    energy = (-lse(d)).requires_grad_(True)
    r0 = null_responsibility(d, d0)
    through_energy = torch.sigmoid(energy - d0)
    (slope,) = _grad(through_energy.sum(), energy)
    with torch.no_grad():
        order_r0 = torch.sign(r0[:, None] - r0[None, :])
        order_energy = torch.sign(energy[:, None] - energy[None, :])
        disagree = (order_r0 != order_energy).to(DTYPE).mean()
    error = max(_max_error((r0, through_energy.detach()), (slope, r0 * (1 - r0))), float(disagree))
    ok = _gradcheck(lambda dd: null_responsibility(dd, d0), d)
    return error, ok


def _off_diagonal(matrix: Tensor) -> Tensor:
    return matrix - torch.diag_embed(torch.diagonal(matrix, dim1=-2, dim2=-1))


@register(
    "no_competition",
    "§4.4, §6.1",
    "C7, C8",
    "Jacobian of dL/dd: diagonal for correntropy and sigmoids, diag(r) - r r^T for LSE",
)
def _no_competition(gen: torch.Generator) -> tuple[float, bool]:
    d = 2 * _randn(gen, 5).abs() + 0.1
    target = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0], dtype=DTYPE)
    sigma = 1.5
    h_lse = torch.autograd.functional.hessian(lse, d)
    h_corr = torch.autograd.functional.hessian(lambda x: correntropy(x, sigma), d)
    h_sig = torch.autograd.functional.hessian(lambda x: sigmoid_bce(x, target), d)
    r = responsibilities(d)
    p = torch.sigmoid(-d)
    u = d**2 / sigma**2
    corr_diag = (2 / sigma**2) * torch.exp(-u) * (1 - 2 * u)
    error = _max_error(
        (h_lse, torch.diag(r) - torch.outer(r, r)),
        (_off_diagonal(h_corr), torch.zeros_like(h_corr)),
        (_off_diagonal(h_sig), torch.zeros_like(h_sig)),
        (torch.diagonal(h_corr), corr_diag),
        (torch.diagonal(h_sig), p * (1 - p)),
    )
    # The LSE Hessian must actually couple the components, or the contrast says nothing.
    coupled = float(_off_diagonal(h_lse).abs().max()) > 1e-3
    ok = (
        coupled
        and _gradcheck(lambda x: correntropy(x, sigma, reduction="none"), d)
        and _gradcheck(lambda x: sigmoid_bce(x, target, reduction="none"), d)
    )
    return error, ok


# ---------------------------------------------------------------------------------------------
# 11-14: partial clamps, imperfect supervision (§7.3)
# ---------------------------------------------------------------------------------------------


def _clamped_minus_free(d: Tensor, weights: Tensor) -> Tensor:
    """The closed form r~ - r with r~_j = w_j r_j / sum_k w_k r_k, written out from r."""
    r = responsibilities(d)
    weighted = weights * r
    return weighted / weighted.sum(dim=-1, keepdim=True) - r


def _clamp_check(
    gen: torch.Generator, weights: Tensor, loss: Callable[[Tensor], Tensor]
) -> tuple[float, bool]:
    """Gradient (closed form r~ - r) and value (-log sum_j w_j r_j) of a partial clamp."""
    n, k = weights.shape
    d = (3 * _randn(gen, n, k)).requires_grad_(True)
    (grad,) = _grad(loss(d).sum(), d)
    value = -torch.log((weights * responsibilities(d.detach())).sum(dim=-1))
    error = _max_error((grad, _clamped_minus_free(d.detach(), weights)), (loss(d.detach()), value))
    return error, _gradcheck(loss, d)


@register(
    "candidate_set_gradient",
    "§7.3",
    "C14b",
    "partial labels: d/dd_j [-log sum_{j in S} r_j] = r~_j - r_j, r~ = r renormalized over S",
)
def _candidate_set_gradient(gen: torch.Generator) -> tuple[float, bool]:
    candidates = torch.rand(8, 6, generator=gen, dtype=DTYPE) < 0.5
    candidates[:, 0] |= ~candidates.any(dim=-1)  # no empty set
    candidates[-1] = True  # an unlabeled row: all classes, loss 0 and no gradient
    weights = candidates.to(DTYPE)
    return _clamp_check(gen, weights, lambda x: candidate_set_nll(x, candidates, reduction="none"))


@register(
    "soft_label_gradient",
    "§7.3",
    "C14b",
    "soft labels as evidence: d/dd_j [-log sum_j t_j r_j] = r~_j - r_j, r~_j ∝ t_j r_j",
)
def _soft_label_gradient(gen: torch.Generator) -> tuple[float, bool]:
    target = torch.softmax(2 * _randn(gen, 8, 6), dim=-1)
    return _clamp_check(gen, target, lambda x: soft_label_nll(x, target, reduction="none"))


@register(
    "transition_gradient",
    "§7.3",
    "C14b",
    "noisy labels: d/dd_j [-log sum_j T_{j,y~} r_j] = r~_j - r_j, r~_j ∝ T_{j,y~} r_j",
)
def _transition_gradient(gen: torch.Generator) -> tuple[float, bool]:
    transition = torch.softmax(_randn(gen, 6, 6) + 3 * torch.eye(6, dtype=DTYPE), dim=-1)
    noisy = torch.randint(0, 6, (8,), generator=gen)
    weights = torch.stack([transition[:, label] for label in noisy.tolist()])
    return _clamp_check(
        gen, weights, lambda x: transition_nll(x, noisy, transition, reduction="none")
    )


@register(
    "crowd_gradient",
    "§7.3",
    "C14b",
    "crowd labels: d/dd_j [-log sum_j prod_a pi^a_{j,y_a} r_j] = r~_j - r_j (Dawid-Skene)",
)
def _crowd_gradient(gen: torch.Generator) -> tuple[float, bool]:
    n, a, k = 8, 4, 5
    confusions = torch.softmax(_randn(gen, a, k, k) + 2 * torch.eye(k, dtype=DTYPE), dim=-1)
    annotations = torch.randint(-1, k, (n, a), generator=gen)  # -1: no label
    weights = torch.ones(n, k, dtype=DTYPE)
    for row in range(n):
        for annotator in range(a):
            label = int(annotations[row, annotator])
            if label >= 0:
                weights[row] *= confusions[annotator, :, label]
    return _clamp_check(
        gen, weights, lambda x: crowd_nll(x, annotations, confusions, reduction="none")
    )


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


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

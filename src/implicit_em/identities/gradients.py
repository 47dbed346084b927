r"""The gradient identities: each gradient in closed form, written with responsibilities.

The three signs of $\partial L/\partial d$ (log-sum-exp $-r$, mixture NLL $+r$, cross-entropy
$t - r$; §3.1, §4.3), attention's value and score gradients and Hopfield retrieval (§4.2), the EM
mean update as a preconditioned gradient step (Xu & Jordan, §4.1), and the volume term's
gradient (§6.2). Registered in that order.
"""

from __future__ import annotations

import torch
from torch import Tensor

from implicit_em.attention import attention, attention_gradients
from implicit_em.core import lse, responsibilities
from implicit_em.identities.registry import (
    DTYPE,
    gradients_of,
    max_error,
    passes_gradcheck,
    randn,
    register,
)
from implicit_em.objectives import cross_entropy, mixture_nll, soft_targets

# ---------------------------------------------------------------------------------------------
# 1-3: the three signs
# ---------------------------------------------------------------------------------------------


@register("lse_gradient", "§3.1", "C1", "dL/dd_j = -r_j for L = log sum_j exp(-d_j)")
def _lse_gradient(gen: torch.Generator) -> tuple[float, bool]:
    d = (3 * randn(gen, 6, 5)).requires_grad_(True)
    (grad,) = gradients_of(lse(d).sum(), d)
    error = max_error((grad, -responsibilities(d.detach())))
    return error, passes_gradcheck(lse, d)


@register("nll_gradient", "§3.1", "R4", "d/dd_j [-log sum_j exp(-d_j)] = +r_j")
def _nll_gradient(gen: torch.Generator) -> tuple[float, bool]:
    d = (3 * randn(gen, 6, 5)).requires_grad_(True)
    log_prior = torch.log_softmax(randn(gen, 5), dim=-1)
    (grad,) = gradients_of(mixture_nll(d, reduction="sum"), d)
    (grad_prior,) = gradients_of(mixture_nll(d, log_prior=log_prior, reduction="sum"), d)
    error = max_error(
        (grad, responsibilities(d.detach())),
        (grad_prior, responsibilities(d.detach(), log_prior)),
    )
    ok = passes_gradcheck(lambda x: mixture_nll(x, log_prior=log_prior, reduction="none"), d)
    return error, ok


@register(
    "cross_entropy_gradient",
    "§4.3",
    "C6, R4",
    "d/dd_j [d_y + log sum_k exp(-d_k)] = 1[j=y] - r_j; soft targets: t_j - r_j",
)
def _cross_entropy_gradient(gen: torch.Generator) -> tuple[float, bool]:
    d = (3 * randn(gen, 8, 6)).requires_grad_(True)
    y = torch.randint(0, 6, (8,), generator=gen)
    t = torch.softmax(randn(gen, 8, 6), dim=-1)
    r = responsibilities(d.detach())
    (grad_hard,) = gradients_of(cross_entropy(d, y, reduction="sum"), d)
    (grad_soft,) = gradients_of(cross_entropy(d, t, reduction="sum"), d)
    (grad_smooth,) = gradients_of(cross_entropy(d, y, label_smoothing=0.1, reduction="sum"), d)
    onehot = torch.nn.functional.one_hot(y, 6).to(DTYPE)
    error = max_error(
        (grad_hard, onehot - r),
        (grad_soft, t - r),
        (grad_smooth, soft_targets(d.detach(), y, 0.1) - r),
    )
    ok = passes_gradcheck(lambda x: cross_entropy(x, t, reduction="none"), d) and passes_gradcheck(
        lambda x: cross_entropy(x, y, label_smoothing=0.1, reduction="none"), d
    )
    return error, ok


# ---------------------------------------------------------------------------------------------
# 4-6: attention, the conditional regime
# ---------------------------------------------------------------------------------------------


def _qkvg(gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    q, k, v = randn(gen, 2, 5, 4), randn(gen, 2, 7, 4), randn(gen, 2, 7, 3)
    return q, k, v, randn(gen, 2, 5, 3)


@register("attention_values", "§4.2", "C5, R2", "dL/dv_j = sum_i alpha_ij g_i")
def _attention_values(gen: torch.Generator) -> tuple[float, bool]:
    q, k, v, g = _qkvg(gen)
    v = v.requires_grad_(True)
    out, _ = attention(q, k, v)
    (grad_v,) = gradients_of((out * g).sum(), v)
    closed = attention_gradients(q, k, v.detach(), g)
    ok = passes_gradcheck(lambda vv: attention(q, k, vv)[0], v)
    return max_error((grad_v, closed.values)), ok


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
    (grad_s,) = gradients_of((out * g).sum(), s)
    q_, k_ = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    grad_q, grad_k = gradients_of((attention(q_, k_, v)[0] * g).sum(), (q_, k_))
    closed = attention_gradients(q, k, v, g)
    error = max_error((grad_s, closed.scores), (grad_q, closed.queries), (grad_k, closed.keys))
    ok = passes_gradcheck(lambda qq, kk: attention(qq, kk, v)[0], q, k)
    return error, ok


@register(
    "hopfield_query",
    "§4.2",
    "C5",
    "d/dq log sum_j exp(q.k_j) = sum_j alpha_j k_j (retrieval)",
)
def _hopfield_query(gen: torch.Generator) -> tuple[float, bool]:
    q, keys = randn(gen, 3, 4).requires_grad_(True), randn(gen, 9, 4)

    def energy(qq: Tensor) -> Tensor:
        return lse(-(qq @ keys.T))

    (grad_q,) = gradients_of(energy(q).sum(), q)
    alpha = responsibilities(-(q.detach() @ keys.T))
    return max_error((grad_q, alpha @ keys)), passes_gradcheck(energy, q)


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
    x = randn(gen, n, dim)
    means = randn(gen, k, dim).requires_grad_(True)
    a = 0.3 * randn(gen, k, dim, dim)
    cov = a @ a.transpose(-2, -1) + torch.eye(dim, dtype=DTYPE)
    chol = torch.linalg.cholesky(cov)
    log_weights = torch.log_softmax(randn(gen, k), dim=-1)

    def log_likelihood(mu: Tensor) -> Tensor:
        return lse(-_gaussian_log_joint(x, mu, chol, log_weights))

    (grad,) = gradients_of(log_likelihood(means).sum(), means)
    r = responsibilities(-_gaussian_log_joint(x, means.detach(), chol, log_weights))
    n_j = r.sum(0)
    em = (r.T @ x) / n_j[:, None]
    preconditioned = means.detach() + torch.einsum("kde,ke->kd", cov, grad) / n_j[:, None]
    return max_error((preconditioned, em)), passes_gradcheck(log_likelihood, means)


@register(
    "volume_gradient",
    "§6.2",
    "C9, m1",
    "e_j = 1/2|W_j x + b_j|^2 - log|det W_j|: dL/dW_j = r_j (W_j^-T - z_j x^T)",
)
def _volume_gradient(gen: torch.Generator) -> tuple[float, bool]:
    k, dim = 3, 4
    x = randn(gen, dim)
    w = (torch.eye(dim, dtype=DTYPE) + 0.3 * randn(gen, k, dim, dim)).requires_grad_(True)
    b = randn(gen, k, dim)

    def objective(ww: Tensor) -> Tensor:
        z = ww @ x + b
        energy = 0.5 * (z**2).sum(-1) - torch.linalg.slogdet(ww).logabsdet
        return lse(energy)

    (grad,) = gradients_of(objective(w), w)
    with torch.no_grad():
        z = w @ x + b
        energy = 0.5 * (z**2).sum(-1) - torch.linalg.slogdet(w).logabsdet
        r = responsibilities(energy)
        closed = r[:, None, None] * (
            torch.linalg.inv(w).transpose(-2, -1) - z.unsqueeze(-1) * x.unsqueeze(-2)
        )
    return max_error((grad, closed)), passes_gradcheck(objective, w)

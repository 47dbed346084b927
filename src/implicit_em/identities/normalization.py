r"""The identities of normalization: who competes for responsibility, and over what.

A null component's responsibility $r_0$ and its gradients, and that a constant null orders inputs
as the energy does (§7.3); no competition without normalization: the Hessian in $d$ is diagonal
for correntropy and independent sigmoids, $\mathrm{diag}(r) - r r^\top$ for log-sum-exp
(§4.4, §6.1); and the partial clamps of imperfect supervision, whose gradient is
$\tilde r - r$ with $r$ renormalized over the evidence (§7.3). Registered in that order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from implicit_em.core import lse, responsibilities
from implicit_em.identities.registry import (
    DTYPE,
    gradients_of,
    max_error,
    passes_gradcheck,
    randn,
    register,
)
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
    transition_nll,
)

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
    d = 2 * randn(gen, 6, 4)
    d0 = torch.tensor(0.7, dtype=DTYPE, requires_grad=True)
    y = torch.tensor([0, 4, 2, 4, 1, 3])  # 4 = K: "none of the above"
    r0 = null_responsibility(d, d0.detach())
    r_ext = responsibilities(append_null(d, d0.detach()))
    (grad_nll,) = gradients_of(mixture_nll(append_null(d, d0), reduction="sum"), d0)
    (grad_ce,) = gradients_of(cross_entropy(append_null(d, d0), y, reduction="sum"), d0)
    error = max_error(
        (r0, r_ext[:, -1]),
        (grad_nll, r0.sum()),
        (grad_ce, ((y == 4).to(DTYPE) - r0).sum()),
    )
    ok = passes_gradcheck(
        lambda dd, z: cross_entropy(append_null(dd, z), y, reduction="none"), d, d0
    )
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
    d = 3 * randn(gen, 64, 5)
    d0 = 0.4
    energy = (-lse(d)).requires_grad_(True)
    r0 = null_responsibility(d, d0)
    through_energy = torch.sigmoid(energy - d0)
    (slope,) = gradients_of(through_energy.sum(), energy)
    with torch.no_grad():
        order_r0 = torch.sign(r0[:, None] - r0[None, :])
        order_energy = torch.sign(energy[:, None] - energy[None, :])
        disagree = (order_r0 != order_energy).to(DTYPE).mean()
    error = max(max_error((r0, through_energy.detach()), (slope, r0 * (1 - r0))), float(disagree))
    ok = passes_gradcheck(lambda dd: null_responsibility(dd, d0), d)
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
    d = 2 * randn(gen, 5).abs() + 0.1
    target = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0], dtype=DTYPE)
    sigma = 1.5
    h_lse = torch.autograd.functional.hessian(lse, d)
    h_corr = torch.autograd.functional.hessian(lambda x: correntropy(x, sigma), d)
    h_sig = torch.autograd.functional.hessian(lambda x: sigmoid_bce(x, target), d)
    r = responsibilities(d)
    p = torch.sigmoid(-d)
    u = d**2 / sigma**2
    corr_diag = (2 / sigma**2) * torch.exp(-u) * (1 - 2 * u)
    error = max_error(
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
        and passes_gradcheck(lambda x: correntropy(x, sigma, reduction="none"), d)
        and passes_gradcheck(lambda x: sigmoid_bce(x, target, reduction="none"), d)
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
    d = (3 * randn(gen, n, k)).requires_grad_(True)
    (grad,) = gradients_of(loss(d).sum(), d)
    value = -torch.log((weights * responsibilities(d.detach())).sum(dim=-1))
    error = max_error((grad, _clamped_minus_free(d.detach(), weights)), (loss(d.detach()), value))
    return error, passes_gradcheck(loss, d)


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
    target = torch.softmax(2 * randn(gen, 8, 6), dim=-1)
    return _clamp_check(gen, target, lambda x: soft_label_nll(x, target, reduction="none"))


@register(
    "transition_gradient",
    "§7.3",
    "C14b",
    "noisy labels: d/dd_j [-log sum_j T_{j,y~} r_j] = r~_j - r_j, r~_j ∝ T_{j,y~} r_j",
)
def _transition_gradient(gen: torch.Generator) -> tuple[float, bool]:
    transition = torch.softmax(randn(gen, 6, 6) + 3 * torch.eye(6, dtype=DTYPE), dim=-1)
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
    confusions = torch.softmax(randn(gen, a, k, k) + 2 * torch.eye(k, dtype=DTYPE), dim=-1)
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

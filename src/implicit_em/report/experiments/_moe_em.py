r"""E9's baselines: a Jordan-Jacobs mixture of experts fitted by EM, a learnable noise scale, and
a gate-free model.

Experts are linear, $o_i(x) = w_i x + c_i$, each with its own noise scale $\sigma_i$, and the
gate is any module mapping `x[N, 1]` to logits `[N, K]`. The likelihood of a point is
$\sum_i g_i(x)\,\mathcal N(y; o_i(x), \sigma_i^2)$: in the package's terms the distances
$d_i = \tfrac12 (y - o_i)^2/\sigma_i^2$ with the volume term $\log|\det W_i| = -\log\sigma_i$
and the prior $\log g(x)$ ([gaussian_expert_nll][]).

EM (Jordan and Jacobs, 1994), from given parameters:

* E-step: $h_{ti} \propto g_i(x_t)\,\mathcal N(y_t; o_i(x_t), \sigma_i^2)$;
* M-step, experts: weighted least squares per expert, in closed form;
  $\sigma_i^2 = \sum_t h_{ti}(y_t - o_i(x_t))^2 / \sum_t h_{ti}$;
* M-step, gate: the gate's cross-entropy against the soft targets $h$,
  $-\sum_t\sum_i h_{ti}\log g_i(x_t)$, lowered by `gate_steps` Adam steps (a generalized
  M-step: an MLP gate has no closed form; Jordan and Jacobs used IRLS for a linear gate).

A gate-free model replaces the gate by [ConstantGate][]: fixed uniform mixing weights, so its
loss is $\ell = -\log\sum_i e^{-d_i} + \log K$ and nothing but the objective routes. Its
experts still receive updates routed by the responsibilities $h$ (the gradient of the mixture
loss in $d_i$ is $h_i$), which is what C13 says makes an explicit gate unnecessary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.core import responsibilities
from implicit_em.objectives import mixture_nll
from implicit_em.report.experiments._experts import (
    gate_kl,
    matched_purity,
    one_thread,
    piecewise_task,
    start_model,
)
from implicit_em.report.experiments._neural import minibatches

__all__ = [
    "BASELINES",
    "ConstantGate",
    "EMFit",
    "baseline",
    "em_fit",
    "gaussian_expert_nll",
]


class ConstantGate(nn.Module):
    """No gate: the same logit 0 for every expert and every `x` (uniform mixing weights, no
    parameters)."""

    def __init__(self, experts: int) -> None:
        super().__init__()
        self.register_buffer("logits", torch.zeros(experts))

    def forward(self, x: Tensor) -> Tensor:
        return self.logits.expand(len(x), -1)


def _distances(y: Tensor, o: Tensor, log_sigma: Tensor) -> Tensor:
    return 0.5 * ((y - o) * torch.exp(-log_sigma)) ** 2


def gaussian_expert_nll(y: Tensor, o: Tensor, log_sigma: Tensor, log_g: Tensor) -> Tensor:
    r"""Mean $-\log\sum_i g_i\,\mathcal N(y; o_i, \sigma_i^2)$ up to $\tfrac12\log 2\pi$.

    `y[N, 1]`, `o[N, K]`, `log_sigma[K]` (learnable noise scales), `log_g[N, K]`; through
    `mixture_nll` with $d_i = \tfrac12(y-o_i)^2/\sigma_i^2$ and `log_det` $= -\log\sigma_i$.
    """
    d = _distances(y, o, log_sigma)
    return mixture_nll(d, log_prior=log_g, log_det=(-log_sigma).expand_as(d))


@dataclass(frozen=True)
class EMFit:
    """EM's end point: slopes and intercepts `[K]`, `log_sigma[K]`, the mean negative
    log-likelihood before each iteration and after the last, and the responsibilities."""

    slopes: Tensor
    intercepts: Tensor
    log_sigma: Tensor
    nll: list[float]
    h: Tensor


def em_fit(
    x: Tensor,
    y: Tensor,
    slopes: Tensor,
    intercepts: Tensor,
    log_sigma: Tensor,
    gate: nn.Module,
    iterations: int,
    gate_steps: int = 20,
    gate_lr: float = 1e-2,
    min_sigma: float = 1e-3,
) -> EMFit:
    """Fit the experts and `gate` by EM from the given parameters (the gate in place).

    `x[N, 1]`, `y[N, 1]`; `slopes`, `intercepts`, `log_sigma` are `[K]` starts (copied).
    An expert left without responsibility keeps its parameters; $\\sigma_i$ is floored at
    `min_sigma` so that an expert fitting two points exactly cannot end the fit with an
    infinite likelihood.
    """
    w, c, ls = (t.detach().clone().double() for t in (slopes, intercepts, log_sigma))
    xd, yd = x.double(), y.double()
    optimizer = torch.optim.Adam(gate.parameters(), lr=gate_lr)
    curve = []
    for _ in range(iterations + 1):
        with torch.no_grad():
            log_g = torch.log_softmax(gate(x), dim=-1).double()
            o = xd * w + c
            curve.append(float(gaussian_expert_nll(yd, o, ls, log_g)))
            h = responsibilities(_distances(yd, o, ls) + ls, log_prior=log_g)
        if len(curve) > iterations:
            break
        with torch.no_grad():
            mass = h.sum(0)
            sx, sy = (h * xd).sum(0), (h * yd).sum(0)
            sxx, sxy = (h * xd * xd).sum(0), (h * xd * yd).sum(0)
            det = mass * sxx - sx**2
            ok = det > 1e-12 * mass.clamp_min(1e-300) ** 2
            w = torch.where(ok, (mass * sxy - sx * sy) / det.where(ok, torch.ones_like(det)), w)
            c = torch.where(ok, (sy - w * sx) / mass.clamp_min(1e-300), c)
            residual = (h * (yd - (xd * w + c)) ** 2).sum(0) / mass.clamp_min(1e-300)
            sigma = residual.clamp_min(min_sigma**2).sqrt()
            ls = torch.where(mass > 0, sigma.log(), ls)
        target = h.to(x.dtype)
        for _ in range(gate_steps):
            loss = -(target * torch.log_softmax(gate(x), dim=-1)).sum(-1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return EMFit(w, c, ls, curve, h)


BASELINES = {
    "em": "Jordan-Jacobs EM (learnable σ), same start",
    "sigma": "mixture loss, learnable σ",
    "gate_free": "mixture loss, no gate (uniform weights)",
}
"""E9's baselines, by key."""


@one_thread()
def baseline(kind: str, seed: int, config: dict[str, Any]) -> dict[str, float]:
    """Fit one baseline `kind` on E9's task from the start of seed `seed` and measure it on
    fresh test points, as E9 measures its two objectives.

    `em`: [em_fit][] from the model E9's `mixture` run starts from; `sigma`: the mixture loss
    with a learnable noise scale per expert ([gaussian_expert_nll][]), Adam; `gate_free`: the
    mixture loss (the configuration's fixed σ) with a [ConstantGate][], Adam. Every fit starts
    from [start_model][] with σ at the configuration's `sigma` (the k-means start, planted
    experts or gate where the configuration says so). Returns the gate's and the
    responsibilities' matched purity, KL(h ‖ g), the routed MSE and the mean learned σ.
    """
    if kind not in BASELINES:
        raise ValueError(f"kind must be one of {sorted(BASELINES)}, got {kind!r}")
    generator = torch.Generator().manual_seed(seed)
    x, y, _ = piecewise_task(config["n_train"], config, generator)
    x_test, y_test, seg_test = piecewise_task(config["n_test"], config, generator)
    torch.manual_seed(seed)
    experts = config["experts"]
    model = start_model(config, ConstantGate(experts) if kind == "gate_free" else None, (x, y))
    log_sigma = torch.full((experts,), math.log(config["sigma"]), requires_grad=kind == "sigma")
    if kind == "em":
        fit = em_fit(
            x,
            y,
            model.experts.weight[:, 0],
            model.experts.bias,
            log_sigma,
            model.gate,
            config["em_iterations"],
            config["em_gate_steps"],
            config["lr"],
        )
        with torch.no_grad():
            model.experts.weight[:, 0] = fit.slopes.float()
            model.experts.bias.copy_(fit.intercepts.float())
        log_sigma = fit.log_sigma.float()
    else:
        params = [*model.parameters(), *([log_sigma] if kind == "sigma" else [])]
        optimizer = torch.optim.Adam(params, lr=config["lr"])
        for index in minibatches(len(x), config["batch"], config["steps"], generator):
            o, log_g = model(x[index])
            loss = gaussian_expert_nll(y[index], o, log_sigma, log_g)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        o, log_g = model(x_test)
        d = _distances(y_test, o, log_sigma.detach()) + log_sigma.detach()
        h = responsibilities(d, log_prior=log_g)
        route = log_g.argmax(-1)
        segments = len(config["slopes"])
        return {
            "purity": matched_purity(route, seg_test, experts, segments),
            "owner_purity": matched_purity(h.argmax(-1), seg_test, experts, segments),
            "kl": float(gate_kl(h, log_g).mean()),
            "mse_routed": float(((y_test[:, 0] - o.gather(1, route[:, None])[:, 0]) ** 2).mean()),
            "sigma": float(log_sigma.detach().exp().mean()),
        }

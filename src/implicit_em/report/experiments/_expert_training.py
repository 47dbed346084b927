"""E9's unit: a mixture of experts trained from one seed under one objective, with its gate's purity, the responsibilities' purity, the gate's KL to them, its errors and the gate-gradient identity checked."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

from implicit_em.core import responsibilities
from implicit_em.objectives import mixture_nll
from implicit_em.report.experiments._experts import (
    MixtureOfExperts,
    expert_distances,
    gate_kl,
    matched_purity,
    one_thread,
    piecewise_task,
    start_model,
)
from implicit_em.report.experiments._neural import (
    device_of,
    minibatches,
    quiet_alarms,
)

OBJECTIVES = {"mixture": "competitive mixture loss", "blend": "blended output, squared error"}


def gate_gradient_residual(
    model: MixtureOfExperts, x: Tensor, y: Tensor, sigma: float = 1.0
) -> float:
    r"""$\max |B\,\partial\ell/\partial\,\mathrm{logit} - (g - h)|$ under the mixture loss on
    `(x, y)`: the gate's gradient is its distance from the responsibilities, so descent fits the
    gate to them (the construction behind "gates are responsibilities")."""
    logits = model.gate(x).detach().requires_grad_()
    log_g = torch.log_softmax(logits, dim=-1)
    d = expert_distances(y, model.experts(x), sigma)
    (grad,) = torch.autograd.grad(mixture_nll(d, log_prior=log_g), logits)
    with torch.no_grad():
        h = responsibilities(d, log_prior=log_g)
        return float((grad * len(x) - (log_g.exp() - h)).abs().max())


@one_thread()
def train(objective: str, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    r"""Train one mixture of experts with `objective` from [start_model][] and measure it on
    fresh test points; the distances are $d_i = \tfrac12(y - o_i)^2/\sigma^2$ with the
    configuration's fixed `sigma`."""
    from implicit_em.trace import Tracer

    device, sigma = device_of(config), config["sigma"]
    generator = torch.Generator().manual_seed(seed)
    x, y, _ = piecewise_task(config["n_train"], config, generator)
    x_test, y_test, seg_test = (
        t.to(device) for t in piecewise_task(config["n_test"], config, generator)
    )
    torch.manual_seed(seed)
    model = start_model(config, data=(x, y)).to(device)
    x, y = x.to(device), y.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    kl_curve: list[Tensor] = []
    h_mean: list[Tensor] = []
    # every row of the batch: the tracer's mass is compared with this batch's mean responsibility
    traced = (
        Tracer(model, every=config["trace_every"], max_responsibility_rows=None)
        if objective == "mixture" and config["trace_every"] > 0
        else None
    )
    with quiet_alarms(), traced or contextlib.nullcontext():
        for index in minibatches(len(x), config["batch"], config["steps"], generator):
            index = index.to(device)
            o, log_g = model(x[index])
            d = expert_distances(y[index], o, sigma)
            if objective == "mixture":
                d.retain_grad()
                loss = mixture_nll(d, log_prior=log_g)
            else:
                loss = 0.5 * ((y[index] - (log_g.exp() * o).sum(-1, keepdim=True)) ** 2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():
                # The mixture loss is a batch mean: its gradient is h / B (R4's sign).
                h = (
                    d.grad * len(index)
                    if objective == "mixture"
                    else responsibilities(d, log_prior=log_g)
                )
                kl_curve.append(gate_kl(h, log_g).mean())
                h_mean.append(h.mean(0))
            optimizer.step()
            if traced is not None:
                traced.step()
    result: dict[str, Any] = {"kl_curve": torch.stack(kl_curve).tolist()}
    if objective == "mixture":
        result["gate_gradient_residual"] = gate_gradient_residual(model, x, y, sigma)
    if traced is not None:
        frame = traced.history.to_pandas()
        sites = frame[frame["kind"] == "site"]
        h_read = torch.stack(h_mean).double().cpu()
        agreement = max(
            float((h_read[int(step)] - torch.tensor(mass, dtype=torch.float64)).abs().max())
            for step, mass in zip(sites["step"], sites["mass"], strict=True)
        )
        result["trace_agreement"] = agreement
        result["trace_residual"] = float(sites["residual"].max())
        result["alarms"] = sorted({a["alarm"] for a in traced.alarms})
    with torch.no_grad():
        o, log_g = model(x_test)
        h = responsibilities(expert_distances(y_test, o, sigma), log_prior=log_g)
        route = log_g.argmax(-1)
        segments = len(config["slopes"])
        result.update(
            purity=matched_purity(route, seg_test, config["experts"], segments),
            owner_purity=matched_purity(h.argmax(-1), seg_test, config["experts"], segments),
            kl=float(gate_kl(h, log_g).mean()),
            mse_routed=float(((y_test[:, 0] - o.gather(1, route[:, None])[:, 0]) ** 2).mean()),
            mse_blend=float(((y_test[:, 0] - (log_g.exp() * o).sum(-1)) ** 2).mean()),
            gate_entropy=float(-(log_g.exp() * log_g).sum(-1).mean()),
        )
        grid = torch.linspace(-1, 1, 400, device=device)[:, None]
        o_grid, log_g_grid = model(grid)
        result["grid"] = {
            "x": grid[:, 0].tolist(),
            "route": log_g_grid.argmax(-1).tolist(),
            "routed": o_grid.gather(1, log_g_grid.argmax(-1, keepdim=True))[:, 0].tolist(),
            "blend": (log_g_grid.exp() * o_grid).sum(-1).tolist(),
        }
        result["sample"] = {"x": x_test[:300, 0].tolist(), "y": y_test[:300, 0].tolist()}
    return result

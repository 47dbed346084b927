"""The encoders of E6: their objectives, feature statistics and one traced training."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from implicit_em.core import responsibilities
from implicit_em.objectives import decorrelation_penalty, mixture_nll, variance_penalty
from implicit_em.report.experiments._collapse_baselines import build_encoder, encoder_optimizer
from implicit_em.report.experiments._neural import (
    Images,
    device_of,
    entropy,
    linear_probe_accuracy,
    minibatches,
    quiet_alarms,
)

VARIANTS = {
    "lse": "LSE alone",
    "lse_var": "LSE + variance",
    "lse_var_decor": "LSE + variance + decorrelation",
    "var_decor": "variance + decorrelation alone",
    "layernorm": "LSE alone, LayerNorm before the ReLU",
    "weight_decay": "LSE alone, with weight decay (AdamW)",
}
"""The objectives by key; the last two are the paper's patches for collapse (C9)."""

DEAD_VARIANCE = 0.01
"""A unit is dead when its variance over the training images is below this."""


def encoder_loss(d: Tensor, variant: str, config: dict[str, Any]) -> Tensor:
    r"""The training objective of `variant` on a batch of distances `d[B, K]`.

    The LSE term receives its own view of `d`: the gradient a tracer reads at that site is then
    the LSE term's alone ($r/B$), not the sum with the volume terms' gradients. For
    `var_decor` the LSE is evaluated on `d` detached, outside the loss, so that a tracer
    still sees the forward responsibilities $\operatorname{softmax}(-d)$.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    if variant in ("lse", "layernorm", "weight_decay"):
        return mixture_nll(d)
    volume = config["variance_weight"] * variance_penalty(d)
    if variant in ("lse_var_decor", "var_decor"):
        volume = volume + config["decorrelation_weight"] * decorrelation_penalty(d)
    if variant == "var_decor":
        mixture_nll(d.detach())
        return volume
    return mixture_nll(d.view_as(d)) + volume


def feature_statistics(f: Tensor) -> dict[str, float]:
    r"""Dead units, redundancy and sparsity of features `f[N, K]` (one row per image).

    `dead`: units with variance over the rows below `DEAD_VARIANCE`; `redundancy`:
    $\lVert\operatorname{Corr} - I\rVert_F^2$ over the live units; `mean_sq_corr`: the
    same divided by the number of off-diagonal pairs; `l0`: mean share of non-zero units
    per row; `entropy`: mean $H(\operatorname{softmax}(-f))$ in nats.
    """
    var = f.var(dim=0)
    alive = var >= DEAD_VARIANCE
    live = f[:, alive].double()
    k = live.shape[1]
    if k >= 2:
        centred = live - live.mean(0, keepdim=True)
        cov = centred.T @ centred / (live.shape[0] - 1)
        std = torch.sqrt(torch.diagonal(cov))
        corr = cov / (std[:, None] * std[None, :])
        redundancy = float(((corr - torch.eye(k, dtype=corr.dtype, device=corr.device)) ** 2).sum())
        mean_sq = redundancy / (k * (k - 1))
    else:
        redundancy, mean_sq = 0.0, 0.0
    return {
        "dead": float((~alive).sum()),
        "dead_fraction": float((~alive).double().mean()),
        "redundancy": redundancy,
        "mean_sq_corr": mean_sq,
        "l0": float((f > 0).double().mean()),
        "entropy": float(entropy(responsibilities(f.double())).mean()),
    }


def train_encoder(
    images: Images, variant: str, seed: int, config: dict[str, Any]
) -> dict[str, Any]:
    """Train one encoder with the objective `variant` under the `Tracer`;
    return its final measurements, its training curves and the tracer's records and alarms."""
    from implicit_em.trace import Tracer

    device = device_of(config)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    kind = "layernorm" if variant == "layernorm" else "plain"
    encoder = build_encoder(kind, images.n_features, config["units"]).to(device)
    decay = config["weight_decay"] if variant == "weight_decay" else 0.0
    optimizer = encoder_optimizer(list(encoder.parameters()), config["lr"], decay)
    monitor = images.x_train[: config["monitor"]]
    curve: dict[str, list[float]] = {"step": [], "dead_fraction": [], "l0": []}
    steps = config["steps"]
    batches = minibatches(len(images.y_train), config["batch"], steps, generator)
    with quiet_alarms(), Tracer(encoder, every=config["trace_every"]) as tracer:
        for step, index in enumerate(batches):
            d = encoder(images.x_train[index.to(device)])
            loss = encoder_loss(d, variant, config)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            tracer.step()
            if step % config["curve_every"] == 0 or step == steps - 1:
                with tracer.paused(), torch.no_grad():
                    stats = feature_statistics(encoder(monitor))
                curve["step"].append(step)
                curve["dead_fraction"].append(stats["dead_fraction"])
                curve["l0"].append(stats["l0"])
    frame = tracer.history.to_pandas()
    sites = frame[frame["kind"] == "site"]
    alarms: dict[str, int] = {}
    for alarm in tracer.alarms:
        alarms.setdefault(alarm["alarm"], int(alarm["step"]))
    with torch.no_grad():
        f_train = encoder(images.x_train)
        f_test = encoder(images.x_test)
    final = feature_statistics(f_train)
    on_test = feature_statistics(f_test)
    final["l0"], final["entropy"] = on_test["l0"], on_test["entropy"]
    n_probe = config["probe_train"]
    final["probe"] = linear_probe_accuracy(
        f_train[:n_probe], images.y_train[:n_probe], f_test, images.y_test
    )
    final["weight_norm"] = float(encoder.linear.weight.detach().norm())
    return {
        "final": final,
        "curve": curve,
        "trace": {
            "step": [int(s) for s in sites["step"]],
            "scale": [float(s) for s in sites["scale"]],
            "effective_k": [float(s) for s in sites["effective_k"]],
            "residual": [float(s) for s in sites["residual"].dropna()],
        },
        "alarms": alarms,
    }

"""Training E7's prototype classifiers: cross-entropy with label smoothing under the tracer,
and the unnormalized comparators on the same model; what each is measured by on held-out
inputs (`held_out`)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from implicit_em.core import responsibilities
from implicit_em.objectives import cross_entropy
from implicit_em.report.experiments._competition import (
    encoder_coupling,
    head_gradient,
    head_loss,
    held_out_measures,
    mlp_update_norm,
    wrong_class_competition,
    wrong_class_feature_gradient,
)
from implicit_em.report.experiments._neural import (
    Images,
    device_of,
    minibatches,
    quiet_alarms,
)
from implicit_em.report.experiments._prototypes import (
    PrototypeClassifier,
    competition,
    correction_concentration,
    wrong_class_entropy,
    wrong_class_ranks,
)

__all__ = ["held_out", "train_classifier", "train_comparator"]


def held_out(
    model: PrototypeClassifier,
    images: Images,
    name: str,
    order_inputs: int,
    bias: Tensor | float = 0.0,
) -> dict[str, Any]:
    r"""A trained head `name` (no smoothing in its gradient) measured on the test set.

    `accuracy` and `ece`; `concentration`: how unevenly the wrong classes share the correction
    $\partial\ell/\partial d$ (`correction_concentration`); `competition`: whether a wrong
    class's correction grows as the other wrong classes recede
    (`_competition.wrong_class_competition`); `encoder_coupling`: the wrong
    classes' update to the shared encoder against the correct class's fit
    (`_competition.encoder_coupling`); `wrong_order`: for the first `order_inputs`
    test inputs, the ranks of the wrong classes by distance (nearest last).
    """
    y = images.y_test
    with torch.no_grad():
        h = model.encoder(images.x_test)
        d = model.head(h)
    grad = head_gradient(name, d, y, bias)
    v = wrong_class_feature_gradient(grad, h.double(), model.head.prototypes.detach().double(), y)
    norm = mlp_update_norm(model.encoder.hidden, model.encoder.out, images.x_test, v)
    n = order_inputs
    return {
        **held_out_measures(name, d, y, bias=bias),
        "concentration": float(correction_concentration(grad, y).nanmean()),
        "competition": wrong_class_competition(grad, d, y),
        "encoder_coupling": encoder_coupling(norm, d, y),
        "wrong_order": wrong_class_ranks(-d[:n], y[:n]).tolist(),
    }


def train_classifier(
    images: Images, smoothing: float, seed: int, config: dict[str, Any]
) -> dict[str, Any]:
    """Train one prototype classifier with label smoothing `smoothing` under the tracer;
    measure the competition on every batch and calibration on the test set."""
    from implicit_em.trace import Tracer

    device = device_of(config)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    classes = len(images.classes)
    model = PrototypeClassifier(images.n_features, config["hidden"], config["features"], classes)
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    steps = config["steps"]
    batch_rho, sample_rho, own_wrong_entropy = [], [], []
    batches = minibatches(len(images.y_train), config["batch"], steps, generator)
    with quiet_alarms(), Tracer(model, every=config["trace_every"]) as tracer:
        for index in batches:
            index = index.to(device)
            x, y = images.x_train[index], images.y_train[index]
            h = model.encoder(x)
            d = model.head(h)
            d.retain_grad()
            loss = cross_entropy(d, y, label_smoothing=smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():
                c = competition(d.grad, h, model.head.prototypes, y, smoothing)
                batch_rho.append(c["batch_rho"])
                sample_rho.append(torch.nanmean(c["sample_rho"]))
                own_wrong_entropy.append(wrong_class_entropy(c["r"], y).nanmean())
            optimizer.step()
            tracer.step()
    frame = tracer.history.to_pandas()
    sites = frame[(frame["kind"] == "site") & frame["wrong_entropy"].notna()]
    own = torch.stack(own_wrong_entropy).tolist()
    trace_steps = [int(s) for s in sites["step"]]
    trace_wrong = [float(v) for v in sites["wrong_entropy"]]
    # Steps at which no row had any wrong-class mass left to read have no entropy to compare.
    gaps = [abs(own[s] - v) for s, v in zip(trace_steps, trace_wrong, strict=True)]
    agreement = max((g for g in gaps if not math.isnan(g)), default=float("nan"))
    with torch.no_grad():
        r = responsibilities(model(images.x_test).double())
    return {
        "batch_rho": torch.stack(batch_rho).tolist(),
        "sample_rho": torch.stack(sample_rho).tolist(),
        "trace_steps": trace_steps,
        "trace_wrong_entropy": trace_wrong,
        "trace_residual": float(sites["residual"].max()) if len(sites) else float("nan"),
        "trace_agreement": agreement,
        "wrong_entropy": float(wrong_class_entropy(r, images.y_test).nanmean()),
        "confidence": float(r.amax(1).mean()),
        **held_out(model, images, "ce", config["order_inputs"]),
    }


def train_comparator(images: Images, name: str, seed: int, config: dict[str, Any]) -> dict:
    """Train the same prototype classifier with the unnormalized loss `name` (`ovr_sigmoid` or
    `mse`, with a learnable shared bias $b$; Adam at `config["comparator_lr"]`) and measure it
    on the test set (`held_out`, without the wrong classes' order). Its encoder coupling is NaN
    when it did not learn the task (test accuracy below `config["comparator_min_accuracy"]`):
    a head that learned nothing says nothing about coupling.

    The bias starts at the smallest distance of the untrained model on (up to) the first 1,024
    training images, so that every output $e^{b - d}$ starts at most 1 and none underflows at a
    typical distance. (A fixed start of 1 left the `mse` head's outputs near $e^{-20}$ on
    Fashion-MNIST; a start at the median distance put half the wrong classes' outputs near 1,
    and the head escaped to the all-zero output.)
    """
    device = device_of(config)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    classes = len(images.classes)
    model = PrototypeClassifier(images.n_features, config["hidden"], config["features"], classes)
    model = model.to(device)
    with torch.no_grad():
        start = model(images.x_train[:1024].to(device)).min()
    bias = torch.nn.Parameter(start.detach().clone())
    optimizer = torch.optim.Adam([*model.parameters(), bias], lr=config["comparator_lr"])
    for index in minibatches(len(images.y_train), config["batch"], config["steps"], generator):
        index = index.to(device)
        loss = head_loss(name, model(images.x_train[index]), images.y_train[index], bias=bias)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    measured = held_out(model, images, name, 0, bias=bias.detach())
    del measured["wrong_order"]
    if measured["accuracy"] < config["comparator_min_accuracy"]:
        measured["encoder_coupling"] = float("nan")
    return measured

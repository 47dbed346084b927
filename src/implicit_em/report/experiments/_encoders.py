r"""The encoders of E6: their objectives, feature statistics and one traced training.

Each variant is an encoder $d = \mathrm{ReLU}(N(Wx + b))$ (`_collapse_baselines.build_encoder`)
and a loss on its batch of distances $d[B, K]$:

* `lse`: the LSE objective alone, $-\log\sum_j e^{-d_j}$ (mean over the batch);
* `lse_var_decor`: plus the two surrogates of the volume term, the variance penalty
  $-\sum_j\log(\operatorname{Var}_b d_j + \varepsilon)$ and the decorrelation penalty
  $\lVert\operatorname{Corr}(d) - I\rVert_F^2$;
* `lse_log_det`: plus the volume term itself, $-\log\det(\operatorname{Cov}_b(d) + \varepsilon I)$
  (`objectives.log_det_penalty`);
* `layernorm`, `layernorm_plain`, `batchnorm`: the LSE objective alone with a normalization
  layer before the ReLU (LayerNorm with and without its affine parameters, BatchNorm without);
* `weight_decay`: the LSE objective alone with decoupled weight decay (AdamW);
* `ce`, `ce_log_det`, `ce_layernorm_plain`, `ce_batchnorm`: the supervised prototype classifier,
  the same encoder read by a prototype head $z_c = -\lVert d - \mu_c\rVert^2$ and trained by
  cross-entropy over those distances, alone, with the log-det of $d$, or behind the two
  normalization layers without affine parameters.

A control can plant the encoder's start (`config["start"]`: `"constant"`, $W = 0$ and
$b = -1$, every unit constant over the images; `"spread"`, $W$ ten times its initial draw and
$b = 0$, every unit varying) and shrink the inputs step by step (`config["input_decay"]`: the
images of step $t$ are multiplied by its $t$-th power).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.core import responsibilities
from implicit_em.distances import SquaredEuclidean
from implicit_em.objectives import (
    cross_entropy,
    decorrelation_penalty,
    log_det_penalty,
    mixture_nll,
    variance_penalty,
)
from implicit_em.report.experiments._collapse_baselines import build_encoder, encoder_optimizer
from implicit_em.report.experiments._neural import (
    Images,
    device_of,
    entropy,
    linear_probe_accuracy,
    minibatches,
    quiet_alarms,
)


@dataclass(frozen=True)
class Variant:
    """One encoder training: its label, the encoder's normalization, the volume term added to
    the fit (`none`, `surrogates`, `log_det`), whether AdamW decays the weights, and whether
    the fit is the LSE objective (unsupervised) or the prototype classifier's cross-entropy."""

    label: str
    encoder: str = "plain"
    volume: str = "none"
    weight_decay: bool = False
    supervised: bool = False


VARIANTS = {
    "lse": Variant("LSE alone"),
    "lse_var_decor": Variant("LSE + variance + decorrelation", volume="surrogates"),
    "lse_log_det": Variant("LSE + log-det", volume="log_det"),
    "layernorm": Variant("LSE alone, LayerNorm (affine) before the ReLU", encoder="layernorm"),
    "layernorm_plain": Variant(
        "LSE alone, LayerNorm without affine before the ReLU", encoder="layernorm_plain"
    ),
    "batchnorm": Variant(
        "LSE alone, BatchNorm without affine before the ReLU", encoder="batchnorm"
    ),
    "weight_decay": Variant("LSE alone, with weight decay (AdamW)", weight_decay=True),
    "ce": Variant("prototype classifier, cross-entropy alone", supervised=True),
    "ce_log_det": Variant(
        "prototype classifier, cross-entropy + log-det", volume="log_det", supervised=True
    ),
    "ce_layernorm_plain": Variant(
        "prototype classifier, LayerNorm without affine", encoder="layernorm_plain", supervised=True
    ),
    "ce_batchnorm": Variant(
        "prototype classifier, BatchNorm without affine", encoder="batchnorm", supervised=True
    ),
}
"""The trainings by key: the unsupervised encoders, then the supervised prototype classifiers."""

STARTS = ("default", "constant", "spread")
"""The encoder's start: PyTorch's initialization, or one planted by a control."""

DEAD_VARIANCE = 0.01
"""A unit is dead when its variance over the training images is below this."""

LOG_DET_EPS = 1e-4
"""$\\varepsilon$ of the log-det, in the loss and in the recorded trajectory."""


def encoder_loss(
    d: Tensor,
    variant: str,
    config: dict[str, Any],
    class_distances: Tensor | None = None,
    labels: Tensor | None = None,
) -> Tensor:
    r"""The training objective of `variant` on a batch of distances `d[B, K]`.

    The fit is the LSE objective on `d`, or, for a supervised variant, the cross-entropy over
    the prototype head's `class_distances[B, C]` against `labels[B]`. The LSE term receives its
    own view of `d`: the gradient a tracer reads at that site is then the LSE term's alone
    ($r/B$), not the sum with the volume terms' gradients.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    spec = VARIANTS[variant]
    if spec.supervised:
        if class_distances is None or labels is None:
            raise ValueError(f"variant {variant!r} needs class_distances and labels")
        fit = cross_entropy(class_distances, labels)
    else:
        fit = mixture_nll(d.view_as(d))
    volume = spec.volume
    if volume == "none":
        return fit
    if volume == "surrogates":
        penalty = config["variance_weight"] * variance_penalty(d) + config[
            "decorrelation_weight"
        ] * decorrelation_penalty(d)
    else:
        penalty = config["log_det_weight"] * log_det_penalty(d, LOG_DET_EPS)
    return fit + penalty


def feature_statistics(f: Tensor) -> dict[str, float]:
    r"""Dead units, redundancy, sparsity and volume of features `f[N, K]` (one row per image).

    `dead`: units with variance over the rows below `DEAD_VARIANCE`; `redundancy`:
    $\lVert\operatorname{Corr} - I\rVert_F^2$ over the live units; `mean_sq_corr`: the
    same divided by the number of off-diagonal pairs; `l0`: mean share of non-zero units
    per row; `entropy`: mean $H(\operatorname{softmax}(-f))$ in nats; `log_det`:
    $\log\det(\operatorname{Cov}(f) + \varepsilon I)$ over all units, the volume the
    missing term would reward.
    """
    var = f.var(dim=0)
    alive = var >= DEAD_VARIANCE
    centred_all = (f - f.mean(0, keepdim=True)).double()
    cov_all = centred_all.T @ centred_all / (f.shape[0] - 1)
    eye = torch.eye(f.shape[1], dtype=cov_all.dtype, device=cov_all.device)
    live_cov = cov_all[alive][:, alive]
    k = live_cov.shape[0]
    if k >= 2:
        std = torch.sqrt(torch.diagonal(live_cov))
        corr = live_cov / (std[:, None] * std[None, :])
        redundancy = float(((corr - eye[:k, :k]) ** 2).sum())
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
        "log_det": float(torch.logdet(cov_all + LOG_DET_EPS * eye)),
    }


def _plant(encoder: nn.Module, start: str) -> None:
    """Set the encoder's first layer to the planted `start` (see the module docstring)."""
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    linear = encoder.linear
    with torch.no_grad():
        if start == "constant":
            linear.weight.zero_()
            linear.bias.fill_(-1.0)
        elif start == "spread":
            linear.weight.mul_(10.0)
            linear.bias.zero_()


def _features(encoder: nn.Module, x: Tensor) -> Tensor:
    """The encoder's distances on `x` in evaluation mode (BatchNorm's running statistics)."""
    encoder.eval()
    try:
        with torch.no_grad():
            return encoder(x)
    finally:
        encoder.train()


def train_encoder(
    images: Images, variant: str, seed: int, config: dict[str, Any]
) -> dict[str, Any]:
    """Train one encoder with the objective `variant` under the `Tracer`;
    return its final measurements, its training curves and the tracer's records and alarms.

    The linear probe is read on `config["probe_train"]` training images (none when 0: its
    accuracy is then NaN)."""
    from implicit_em.trace import Tracer

    device = device_of(config)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    spec = VARIANTS[variant]
    encoder = build_encoder(spec.encoder, images.n_features, config["units"]).to(device)
    _plant(encoder, config.get("start", "default"))
    decay = config["weight_decay"] if spec.weight_decay else 0.0
    params = list(encoder.parameters())
    head = None
    if spec.supervised:
        head = SquaredEuclidean(config["units"], len(images.classes)).to(device)
        params += list(head.parameters())
    optimizer = encoder_optimizer(params, config["lr"], decay)
    input_decay = config.get("input_decay", 1.0)
    monitor = images.x_train[: config["monitor"]]
    curve: dict[str, list[float]] = {"step": [], "dead_fraction": [], "l0": [], "log_det": []}
    steps = config["steps"]
    batches = minibatches(len(images.y_train), config["batch"], steps, generator)
    with quiet_alarms(), Tracer(encoder, every=config["trace_every"]) as tracer:
        for step, index in enumerate(batches):
            index = index.to(device)
            d = encoder(images.x_train[index] * input_decay**step)
            class_distances = None if head is None else head(d)
            loss = encoder_loss(d, variant, config, class_distances, images.y_train[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            tracer.step()
            if step % config["curve_every"] == 0 or step == steps - 1:
                with tracer.paused():
                    stats = feature_statistics(_features(encoder, monitor))
                curve["step"].append(step)
                for key in ("dead_fraction", "l0", "log_det"):
                    curve[key].append(stats[key])
    frame = tracer.history.to_pandas()
    sites = frame[frame["kind"] == "site"]
    alarms: dict[str, int] = {}
    for alarm in tracer.alarms:
        alarms.setdefault(alarm["alarm"], int(alarm["step"]))
    f_train = _features(encoder, images.x_train)
    f_test = _features(encoder, images.x_test)
    final = feature_statistics(f_train)
    on_test = feature_statistics(f_test)
    final["l0"], final["entropy"] = on_test["l0"], on_test["entropy"]
    n_probe = config["probe_train"]
    final["probe"] = (
        linear_probe_accuracy(f_train[:n_probe], images.y_train[:n_probe], f_test, images.y_test)
        if n_probe
        else float("nan")
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

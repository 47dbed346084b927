r"""E6's comparators at the encoder's width, and the paper's two patches for collapse.

The encoder of E6 maps an image to $K$ non-negative distances, $d = \mathrm{ReLU}(Wx + b)$.
Beside the objectives trained on it, the linear probe is read on features that no LSE term
shaped, at the same width $K$:

* `pca`: the projections on the first $K$ principal components of the training images
  (scikit-learn's `PCA`, fitted on the training split);
* `random`: the untrained encoder, $\mathrm{ReLU}(W_0 x + b_0)$ with PyTorch's default
  initialization of `nn.Linear` drawn from the seed.

and the normalization layers that might stand in for the missing volume term (C9, §7.3), each
$d = \mathrm{ReLU}(N(Wx + b))$ trained on the LSE objective alone:

* `layernorm`: $N$ = LayerNorm with its learnable gain and bias (the paper's patch as usually
  built; its bias alone can send every pre-activation below zero);
* `layernorm_plain`: LayerNorm without affine parameters: each input's K pre-activations have
  mean 0 and variance 1, so no shift can switch every unit off on every input;
* `batchnorm`: BatchNorm without affine parameters: each unit's pre-activation has mean 0 and
  variance 1 over the batch, so no unit can be constant over the batch.

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.report.experiments._neural import images_of, linear_probe_accuracy
from implicit_em.report.running.plan import Unit

__all__ = [
    "COMPARATORS",
    "ENCODERS",
    "build_encoder",
    "comparator_probes",
    "encoder_optimizer",
    "pca_features",
    "random_features",
]

ENCODERS = ("plain", "layernorm", "layernorm_plain", "batchnorm")


def pca_features(x_train: Tensor, x_test: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Both splits projected on the first `width` principal components of `x_train`."""
    from sklearn.decomposition import PCA

    pca = PCA(width, random_state=0).fit(x_train.detach().cpu().double().numpy())

    def project(x: Tensor) -> Tensor:
        return torch.from_numpy(pca.transform(x.detach().cpu().double().numpy())).to(x.device)

    return project(x_train), project(x_test)


def random_features(
    x_train: Tensor, x_test: Tensor, width: int, seed: int
) -> tuple[Tensor, Tensor]:
    """Both splits through an untrained `ReLU(nn.Linear(D, width))` initialized from `seed`."""
    torch.manual_seed(seed)
    layer = nn.Linear(x_train.shape[1], width).to(x_train.device)
    with torch.no_grad():
        return torch.relu(layer(x_train)), torch.relu(layer(x_test))


class Encoder(nn.Module):
    """$d = \\mathrm{ReLU}(N(Wx + b))$, `[..., D] -> [..., K]`, with $N$ a normalization
    layer or the identity."""

    def __init__(self, in_features: int, units: int, norm: nn.Module) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, units)
        self.norm = norm

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.norm(self.linear(x)))


def build_encoder(kind: str, in_features: int, units: int) -> nn.Module:
    """The encoder of `kind` (one of `ENCODERS`) producing `units` distances.

    Raises
    ------
    ValueError
        If `kind` is unknown.
    """
    norms = {
        "plain": nn.Identity,
        "layernorm": lambda: nn.LayerNorm(units),
        "layernorm_plain": lambda: nn.LayerNorm(units, elementwise_affine=False),
        "batchnorm": lambda: nn.BatchNorm1d(units, affine=False),
    }
    if kind not in norms:
        raise ValueError(f"kind must be one of {ENCODERS}, got {kind!r}")
    return Encoder(in_features, units, norms[kind]())


def encoder_optimizer(
    params: list[nn.Parameter], lr: float, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """Adam, or AdamW with decoupled `weight_decay` when it is positive."""
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    if weight_decay:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.Adam(params, lr=lr)


COMPARATORS = {
    "pca": "PCA, first K components (no training objective)",
    "random": "random features: the untrained encoder",
}
"""Features at the same width K that no LSE term shaped."""


def comparator_probe(config: dict[str, Any], name: str, seed: int) -> float:
    """Linear-probe accuracy of the features `name` (`pca`: one fit, the same for every seed;
    `random`: the untrained encoder of `seed`) at the width `config["units"]`."""
    images = images_of(config)
    n_probe, k = config["probe_train"], config["units"]
    if name == "pca":
        f_train, f_test = pca_features(images.x_train, images.x_test, k)
    else:
        f_train, f_test = random_features(images.x_train, images.x_test, k, seed)
    return linear_probe_accuracy(f_train[:n_probe], images.y_train[:n_probe], f_test, images.y_test)


def comparator_units(config: dict[str, Any]) -> list[Unit]:
    """The comparators' probes as report units: PCA once, random features per seed."""
    return [Unit("pca", comparator_probe, {"config": config, "name": "pca", "seed": 0})] + [
        Unit(f"random-seed{s}", comparator_probe, {"config": config, "name": "random", "seed": s})
        for s in config["seeds"]
    ]


def comparator_probes(config: dict[str, Any], results: Mapping[str, Any]) -> dict[str, list[float]]:
    """Linear-probe accuracy per seed of PCA (the same for every seed) and of random features,
    from the units of `comparator_units`."""
    seeds = config["seeds"]
    return {
        "pca": [results["pca"]] * len(seeds),
        "random": [results[f"random-seed{s}"] for s in seeds],
    }

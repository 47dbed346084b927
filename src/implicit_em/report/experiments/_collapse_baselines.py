r"""E6's comparators at the encoder's width, and the paper's two patches for collapse.

The encoder of E6 maps an image to $K$ non-negative distances, $d = \mathrm{ReLU}(Wx + b)$.
Beside the objectives trained on it, the linear probe is read on features that no LSE term
shaped, at the same width $K$:

* `pca`: the projections on the first $K$ principal components of the training images
  (scikit-learn's `PCA`, fitted on the training split);
* `random`: the untrained encoder, $\mathrm{ReLU}(W_0 x + b_0)$ with PyTorch's default
  initialization of `nn.Linear` drawn from the seed.

and the paper's patches (C9: "normalization layers and weight decay only patch this"):

* `layernorm`: $d = \mathrm{ReLU}(\mathrm{LayerNorm}(Wx + b))$, LayerNorm with its learnable
  gain and bias, trained on the LSE objective alone;
* `weight_decay`: the plain encoder trained on the LSE objective alone with decoupled weight
  decay (AdamW).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.report.experiments._neural import Images, linear_probe_accuracy
from implicit_em.report.units import unit

__all__ = [
    "COMPARATORS",
    "ENCODERS",
    "build_encoder",
    "comparator_probes",
    "encoder_optimizer",
    "pca_features",
    "random_features",
]

ENCODERS = ("plain", "layernorm")


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


class LayerNormEncoder(nn.Module):
    """$d = \\mathrm{ReLU}(\\mathrm{LayerNorm}(Wx + b))$, `[..., D] -> [..., K]`."""

    def __init__(self, in_features: int, units: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, units)
        self.norm = nn.LayerNorm(units)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.norm(self.linear(x)))


class PlainEncoder(nn.Module):
    """$d = \\mathrm{ReLU}(Wx + b)$, `[..., D] -> [..., K]`."""

    def __init__(self, in_features: int, units: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, units)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.linear(x))


def build_encoder(kind: str, in_features: int, units: int) -> nn.Module:
    """The `plain` or `layernorm` encoder producing `units` distances.

    Raises
    ------
    ValueError
        If `kind` is unknown.
    """
    if kind == "plain":
        return PlainEncoder(in_features, units)
    if kind == "layernorm":
        return LayerNormEncoder(in_features, units)
    raise ValueError(f"kind must be one of {ENCODERS}, got {kind!r}")


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


def comparator_probes(images: Images, config: dict[str, Any]) -> dict[str, list[float]]:
    """Linear-probe accuracy per seed of PCA (one fit, the same for every seed) and of random
    features, at the width `config["units"]`, each a report unit."""
    n_probe, k = config["probe_train"], config["units"]

    def probe(f_train: Tensor, f_test: Tensor) -> float:
        return linear_probe_accuracy(
            f_train[:n_probe], images.y_train[:n_probe], f_test, images.y_test
        )

    pca = unit("pca", lambda: probe(*pca_features(images.x_train, images.x_test, k)))
    random = [
        unit(
            f"random-seed{s}",
            lambda s=s: probe(*random_features(images.x_train, images.x_test, k, s)),
        )
        for s in config["seeds"]
    ]
    return {"pca": [pca] * len(config["seeds"]), "random": random}

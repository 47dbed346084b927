r"""A pre-norm residual MLP with a prototype head: the network E19 trains with the LSE objective.

The backbone reads like a transformer's residual stream without attention:
$h_0 = W_{\mathrm{in}}x$, then per block $h_{l+1} = h_l + W_2\,\mathrm{GELU}(W_1 N_l(h_l))$, and
the embedding is $e = N_{\mathrm{out}}(h_L)$. $N$ is the normalization under test (`NORMS`):
LayerNorm with its affine parameters (the practitioner's default), LayerNorm without them,
BatchNorm (with its affine parameters, as it ships) or none. The head holds $K$ prototypes
$\mu_k$ in the embedding space and returns the paper's distances, the squared Euclidean
distances $d_k(x) = \lVert e(x) - \mu_k\rVert^2$ (`[B, K]`), with no temperature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.distances import squared_euclidean
from implicit_em.report.experiments._neural import Images, device_of

__all__ = ["NORMS", "PreNormResidualMLP", "PrototypeHead", "Start", "norm_layer", "seeded_start"]

NORMS = ("layernorm", "layernorm_plain", "batchnorm", "none")
"""The normalizations a backbone can use: LayerNorm (affine), LayerNorm without affine,
BatchNorm (affine) and none."""


def norm_layer(kind: str, width: int) -> nn.Module:
    """The normalization `kind` (one of `NORMS`) over `width` features."""
    if kind == "layernorm":
        return nn.LayerNorm(width)
    if kind == "layernorm_plain":
        return nn.LayerNorm(width, elementwise_affine=False)
    if kind == "batchnorm":
        return nn.BatchNorm1d(width)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")


class PreNormResidualMLP(nn.Module):
    """`x[B, D_in] -> e[B, width]`: an input projection, `blocks` pre-norm residual MLP blocks
    (hidden width `2 * width`, GELU) and a final normalization."""

    def __init__(self, in_features: int, width: int, blocks: int, norm: str) -> None:
        super().__init__()
        self.embed = nn.Linear(in_features, width)
        self.norms = nn.ModuleList(norm_layer(norm, width) for _ in range(blocks))
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
            for _ in range(blocks)
        )
        self.out_norm = norm_layer(norm, width)

    def forward(self, x: Tensor) -> Tensor:
        h = self.embed(x)
        for norm, mlp in zip(self.norms, self.mlps, strict=True):
            h = h + mlp(norm(h))
        return self.out_norm(h)


class PrototypeHead(nn.Module):
    r"""$K$ prototypes in the embedding space: `forward(e[B, D]) -> d[B, K]`,
    $d_k = \lVert e - \mu_k\rVert^2$."""

    def __init__(self, prototypes: Tensor) -> None:
        super().__init__()
        self.prototypes = nn.Parameter(prototypes.clone())

    def forward(self, e: Tensor) -> Tensor:
        return squared_euclidean(e, self.prototypes)

    @classmethod
    def from_embeddings(cls, e: Tensor, k: int, generator: torch.Generator) -> PrototypeHead:
        """`k` prototypes placed on the embeddings of `k` rows of `e[N, D]` drawn without
        replacement by `generator` (the k-means++-free data start that deep clustering uses)."""
        if not 1 <= k <= e.shape[0]:
            raise ValueError(f"k must be in [1, {e.shape[0]}], got {k}")
        rows = torch.randperm(e.shape[0], generator=generator)[:k].to(e.device)
        return cls(e[rows].detach())


@dataclass(frozen=True)
class Start:
    """Where a training run of the backbone begins: the `backbone` on the configuration's
    `device`, the `generator` that draws its batches, and the indices of its first batch
    (`first`, on the device), from which the head's prototypes are placed."""

    backbone: PreNormResidualMLP
    generator: torch.Generator
    first: Tensor
    device: torch.device | str


def seeded_start(images: Images, norm: str, seed: int, config: dict[str, Any]) -> Start:
    """The backbone with normalization `norm` initialised from `seed` (torch's global seed),
    and a batch generator seeded alike whose first draw is the first batch of
    `config["batch"]` training images: every arm of a seed starts from the same weights and
    data."""
    device = device_of(config)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    backbone = PreNormResidualMLP(images.n_features, config["width"], config["blocks"], norm)
    first = torch.randperm(len(images.y_train), generator=generator)[: config["batch"]]
    return Start(backbone.to(device), generator, first.to(device), device)

r"""Models of E8: heads with and without a "none of the above" component, their rivals, and the
scores of a trained model (computed by `_open_set_scores`).

Every model is an MLP encoder $h(x)$ and a head over the $K$ known classes:

* `softmax`: logits $z = Wh + b$, cross-entropy;
* `sigmoid`: the same linear head with one-vs-rest sigmoids $\sigma(z_j)$ and binary
  cross-entropy (unnormalized: every class may be absent);
* `distance`: prototypes, $d_j = \lVert h - \mu_j\rVert^2$, logits $z = -d$, cross-entropy;
* `null`: the prototype head plus a null component with a learnable constant distance $d_0$,
  cross-entropy over $K+1$ components against $(1-\varepsilon)e_y + \varepsilon e_0$
  ($\partial\ell/\partial d_0 = \varepsilon - r_0$: $d_0$ settles where the mean $r_0$ on known
  inputs is $\varepsilon$);
* `null_x`: the same with an input-dependent null, a broad background component in feature
  space, $d_0(x) = \lVert h - m\rVert^2/\tau + c$ with learnable $m$, $c$ and
  $\tau = 1 + \operatorname{softplus}(\rho) > 1$ (wider than the unit-scale prototypes);
* `null_oe`: `null_x` trained with outlier exposure as "none of the above": besides the known
  inputs' loss, $\lambda$ times the cross-entropy $-\log r_0(x)$ of a batch of outliers
  toward the null component ($r_0 \to 1$ on them);
* `oe`: the softmax head trained with outlier exposure (Hendrycks et al., ICLR 2019):
  cross-entropy on known inputs plus $\lambda$ times the cross-entropy from the uniform
  distribution, $-\frac1K\sum_j \log\operatorname{softmax}(z)_j$, on a batch of outliers from
  classes that are neither known nor among the test unknowns;
* `smoothing` (the ablation of the null's soft target): the prototype head with label smoothing
  of mass $\varepsilon$ and no null component.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from implicit_em.core import lse, responsibilities
from implicit_em.distances import SquaredEuclidean
from implicit_em.objectives import (
    NullComponent,
    append_null,
    cross_entropy,
    null_responsibility,
    sigmoid_bce,
)
from implicit_em.report.experiments._neural import MLPEncoder, minibatches
from implicit_em.report.experiments._open_set_scores import (
    knn,
    logit_scores,
    mahalanobis,
    react_clip,
    react_energy,
    vim,
)

MODELS = {
    "softmax": "linear softmax head",
    "sigmoid": "linear one-vs-rest sigmoid head",
    "distance": "distance (prototype) head",
    "null": "distance head + null component, constant d₀",
    "null_x": "distance head + null component, input-dependent d₀(x)",
    "null_oe": "distance head + null d₀(x) trained on outliers as none of the above",
    "oe": "softmax head + outlier exposure",
    "smoothing": "distance head + label smoothing, no null (ablation)",
}
NULLS = ("null", "null_x", "null_oe")
EXPOSED = ("oe", "null_oe")
"""The models trained with outlier exposure."""
LINEAR = ("softmax", "sigmoid", "oe")
SCORES = {
    "msp": "max softmax probability",
    "energy": "energy (−logsumexp)",
    "max_logit": "max logit",
    "mahalanobis": "Mahalanobis (features)",
    "knn": "nearest neighbour (normalized features)",
    "vim": "ViM (virtual logit)",
    "react": "ReAct + energy",
    "null": "null responsibility r₀",
}
CONFIDENT = 0.9
"""The closed-world claim counts unknown inputs given to a known class with more than this."""


class BackgroundNull(nn.Module):
    r"""An input-dependent null distance $d_0(h) = \lVert h - m\rVert^2/\tau + c$,
    $\tau = 1 + \operatorname{softplus}(\rho)$: a broad component in feature space."""

    def __init__(self, features: int, d0: float) -> None:
        super().__init__()
        self.centre = nn.Parameter(torch.zeros(features))
        self.rho = nn.Parameter(torch.tensor(0.0))
        self.offset = nn.Parameter(torch.tensor(float(d0)))

    def forward(self, h: Tensor) -> Tensor:
        tau = 1.0 + nn.functional.softplus(self.rho)
        return ((h - self.centre) ** 2).sum(-1) / tau + self.offset


class OpenSetClassifier(nn.Module):
    """An MLP encoder with one of the heads of `MODELS` (see the module docstring).

    `forward(x)` returns the features `h` and the logits over the known classes
    ($z = Wh + b$, or $z = -d$); `null_distance(h)` the null's $d_0$ (null heads only).
    """

    def __init__(
        self, kind: str, in_features: int, hidden: int, features: int, classes: int, d0: float
    ) -> None:
        super().__init__()
        if kind not in MODELS:
            raise ValueError(f"kind must be one of {sorted(MODELS)}, got {kind!r}")
        self.kind = kind
        self.encoder = MLPEncoder(in_features, hidden, features)
        self.head: nn.Module = (
            nn.Linear(features, classes) if kind in LINEAR else SquaredEuclidean(features, classes)
        )
        self.null: nn.Module | None = (
            NullComponent(d0, learnable=True)
            if kind == "null"
            else BackgroundNull(features, d0)
            if kind in ("null_x", "null_oe")
            else None
        )

    def logits(self, h: Tensor) -> Tensor:
        """The logits of features `h`: $Wh + b$ or $-d$."""
        out = self.head(h)
        return out if self.kind in LINEAR else -out

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.encoder(x)
        return h, self.logits(h)

    def null_distance(self, h: Tensor) -> Tensor:
        """$d_0$ per row of `h`, `[N]` (a constant for `null`)."""
        if self.null is None:
            raise ValueError(f"the {self.kind} head has no null component")
        if isinstance(self.null, NullComponent):
            return self.null.d0.expand(len(h))
        return self.null(h)

    def loss(
        self, x: Tensor, y: Tensor, config: dict[str, Any], outliers: Tensor | None = None
    ) -> Tensor:
        """The training loss on known inputs `(x, y)` (and `outliers`, for `oe` and
        `null_oe`)."""
        if self.kind in EXPOSED and outliers is None:
            raise ValueError("outlier exposure needs a batch of outliers")
        if self.kind == "null_oe" and outliers is not None:
            return self._exposed_null_loss(x, y, config, outliers)
        h, z = self(x)
        epsilon = config["null_target"]
        if self.kind in ("softmax", "oe"):
            loss = nn.functional.cross_entropy(z, y)
            if outliers is not None and self.kind == "oe":
                _, z_out = self(outliers)
                uniform = -torch.log_softmax(z_out, dim=1).mean(1).mean()
                loss = loss + config["oe_weight"] * uniform
            return loss
        if self.kind == "sigmoid":
            return sigmoid_bce(-z, y)
        d = -z
        if self.kind == "smoothing":
            return cross_entropy(d, y, label_smoothing=epsilon)
        if self.null is None:
            return cross_entropy(d, y)
        target = self._null_target(y, d.shape[-1], epsilon, d.dtype)
        return cross_entropy(append_null(d, self.null_distance(h)), target)

    @staticmethod
    def _null_target(y: Tensor, k: int, epsilon: float, dtype: torch.dtype) -> Tensor:
        r"""The soft target over $K+1$ components, $(1-\varepsilon)e_y + \varepsilon e_0$."""
        target = nn.functional.one_hot(y, k + 1).to(dtype) * (1.0 - epsilon)
        target[:, k] += epsilon
        return target

    def _exposed_null_loss(
        self, x: Tensor, y: Tensor, config: dict[str, Any], outliers: Tensor
    ) -> Tensor:
        r"""`null_oe`: the soft-target cross-entropy on the known rows plus `oe_weight` times
        $-\log r_0$ on the outliers (target: the null), from one pass over both."""
        h, z = self(torch.cat([x, outliers]))
        extended = append_null(-z, self.null_distance(h))
        n, k = len(x), z.shape[1]
        target = self._null_target(y, k, config["null_target"], z.dtype)
        none_of_the_above = torch.full((len(outliers),), k, dtype=torch.long, device=z.device)
        return cross_entropy(extended[:n], target) + config["oe_weight"] * cross_entropy(
            extended[n:], none_of_the_above
        )


def train_model(
    kind: str,
    x: Tensor,
    y: Tensor,
    classes: int,
    seed: int,
    config: dict[str, Any],
    outliers: Tensor | None = None,
) -> OpenSetClassifier:
    """Train one open-set classifier on the known classes `(x, y)` (Adam); `oe` and
    `null_oe` also draw a batch of `outliers` per step."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = OpenSetClassifier(
        kind, x.shape[1], config["hidden"], config["features"], classes, config["d0_init"]
    ).to(x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    for index in minibatches(len(y), config["batch"], config["steps"], generator):
        index = index.to(x.device)
        batch_outliers = None
        if kind in EXPOSED and outliers is not None:
            pick = torch.randint(len(outliers), (config["batch"],), generator=generator)
            batch_outliers = outliers[pick.to(x.device)]
        loss = model.loss(x[index], y[index], config, batch_outliers)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model


class Scorer:
    """Every detector of one trained model, fitted once on its training features.

    `scores(x)` returns each score for "unknown" per row of `x` (numpy, float64): the logit
    scores, Mahalanobis, KNN, ReAct, ViM (linear heads) and $r_0$ (null heads);
    `confidence(x)` the largest probability the model gives a known class (softmax over the
    known classes, the largest sigmoid, or over the $K+1$ components with a null).
    """

    def __init__(
        self, model: OpenSetClassifier, x_train: Tensor, y_train: Tensor, config: dict[str, Any]
    ) -> None:
        self.model, self.config = model, config
        self.y_train = y_train
        with torch.no_grad():
            self.h_train, self.z_train = model(x_train)
        self.bank = self.h_train[: config["knn_bank"]]
        self.clip = react_clip(self.h_train)

    def scores(self, x: Tensor) -> dict[str, np.ndarray]:
        model, config = self.model, self.config
        with torch.no_grad():
            h, z = model(x)
            classes = z.shape[1]
            scores = {
                **logit_scores(z),
                "mahalanobis": mahalanobis(self.h_train, self.y_train, h, classes),
                "knn": knn(self.bank, h, k=config["knn_k"]),
                "react": react_energy(self.h_train, h, model.logits, clip=self.clip),
            }
            if model.kind in LINEAR:
                head = model.head
                scores["vim"] = vim(
                    self.h_train, self.z_train, h, z, head.weight, head.bias, config["vim_dim"]
                )
            if model.null is not None:
                d0 = model.null_distance(h).double()
                scores["null"] = null_responsibility(-z.double(), d0)
        return {k: v.cpu().numpy() for k, v in scores.items()}

    def confidence(self, x: Tensor) -> np.ndarray:
        model = self.model
        with torch.no_grad():
            h, z = model(x)
            z = z.double()
            if model.kind == "sigmoid":
                p = torch.sigmoid(z)
            elif model.null is not None:
                p = responsibilities(append_null(-z, model.null_distance(h).double()))[:, :-1]
            else:
                p = torch.softmax(z, dim=1)
        return p.amax(1).cpu().numpy()

    def predicted(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return self.model(x)[1].argmax(1)

    def null_check(self, x: Tensor) -> dict[str, float]:
        """For a constant $d_0$: $r_0$ against $\\sigma(-d_0 - L)$ and the number of pairs
        ordered one way by the energy and the other by $r_0$ (0 by algebra)."""
        model = self.model
        with torch.no_grad():
            h, z = model(x)
            d = -z.double()
            d0 = model.null_distance(h).double()
            r0 = responsibilities(append_null(d, d0))[:, -1]
            energy = -lse(d)
        order = torch.argsort(energy, stable=True)
        energy_sorted, r0_sorted = energy[order], r0[order]
        rising = energy_sorted[1:] > energy_sorted[:-1]
        return {
            "closed_form_error": float((r0 - torch.sigmoid(-d0 - lse(d))).abs().max()),
            "rank_violations": int(((r0_sorted[1:] < r0_sorted[:-1]) & rising).sum()),
            "d0": float(d0.mean()),
        }

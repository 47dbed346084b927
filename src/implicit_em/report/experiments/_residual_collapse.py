r"""E19's trainings: a pre-norm residual MLP with a prototype head, fitted by the LSE objective.

Each arm (`ARMS`) trains `_residual_mlp.PreNormResidualMLP` and a `PrototypeHead` of $K$
prototypes (placed on the embeddings of $K$ training images at the start) on unlabelled images,
minimizing the paper's unsupervised objective over the batch,
$-\frac1B\sum_b\log\sum_k e^{-d_k(x_b)}$ (`objectives.mixture_nll`), with Adam:

* `layernorm`, `layernorm_plain`, `batchnorm`: the objective alone behind LayerNorm (affine),
  LayerNorm without affine, or BatchNorm, in every block and at the output;
* `weight_decay`: LayerNorm (affine), with AdamW's decoupled weight decay;
* `log_det`: LayerNorm (affine), plus the volume term $-\log\det(\operatorname{Cov}_b d +
  \varepsilon I)$ of the batch's distances (`objectives.log_det_penalty`);
* `var_decor`: LayerNorm (affine), plus its two surrogates, $-\sum_k\log(\operatorname{Var}_b
  d_k + \varepsilon)$ and $\lVert\operatorname{Corr}_b(d) - I\rVert_F^2$.

`train_arm` returns the component use of the held-out images (`_component_use`), with its curve
over training, and the embedding's k-nearest-neighbour accuracy (does the network still learn
features, or has it spread its components over noise?), and the component use of the same
held-out responsibilities as each of `PLANTS` replaces them (what the known-answer controls read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.objectives import (
    decorrelation_penalty,
    log_det_penalty,
    mixture_nll,
    variance_penalty,
)
from implicit_em.report.experiments._collapse_baselines import encoder_optimizer
from implicit_em.report.experiments._component_use import component_use
from implicit_em.report.experiments._neural import Images, minibatches
from implicit_em.report.experiments._residual_mlp import PrototypeHead, seeded_start

__all__ = ["ARMS", "LOG_DET_EPS", "PLANTS", "Arm", "arm_loss", "knn_accuracy", "train_arm"]

LOG_DET_EPS = 1e-4
"""$\\varepsilon$ of the log-det and of the variance surrogate."""


@dataclass(frozen=True)
class Arm:
    """One training: its label, the backbone's normalization, the volume term added to the LSE
    objective (`none`, `log_det`, `var_decor`) and whether AdamW decays the weights."""

    label: str
    norm: str = "layernorm"
    volume: str = "none"
    weight_decay: bool = False


ARMS = {
    "bare": Arm("no normalization, LSE alone", norm="none"),
    "layernorm": Arm("LayerNorm (affine), LSE alone"),
    "layernorm_plain": Arm("LayerNorm without affine, LSE alone", norm="layernorm_plain"),
    "batchnorm": Arm("BatchNorm, LSE alone", norm="batchnorm"),
    "weight_decay": Arm("LayerNorm (affine) + weight decay, LSE alone", weight_decay=True),
    "log_det": Arm("LayerNorm (affine), LSE + log-det", volume="log_det"),
    "var_decor": Arm("LayerNorm (affine), LSE + variance + decorrelation", volume="var_decor"),
    "bare_log_det": Arm("no normalization, LSE + log-det", norm="none", volume="log_det"),
}
"""The arms by key: the network without normalization, the four rivals without a volume term,
the two volume terms, and the network without normalization with the log-det (a control's
realistic negative: the bare network with the missing term restored)."""


def arm_loss(d: Tensor, arm: str, config: dict[str, Any]) -> Tensor:
    """The training objective of `arm` on a batch of distances `d[B, K]`."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {sorted(ARMS)}, got {arm!r}")
    fit = mixture_nll(d)
    volume = ARMS[arm].volume
    if volume == "log_det":
        return fit + config["log_det_weight"] * log_det_penalty(d, LOG_DET_EPS)
    if volume == "var_decor":
        return (
            fit
            + config["variance_weight"] * variance_penalty(d, LOG_DET_EPS)
            + config["decorrelation_weight"] * decorrelation_penalty(d)
        )
    return fit


def knn_accuracy(e_train: Tensor, y_train: Tensor, e_test: Tensor, y_test: Tensor, k: int) -> float:
    """Test accuracy of scikit-learn's `KNeighborsClassifier` (`k` neighbours, Euclidean) on
    embeddings: how much class structure the embedding keeps, read without training a probe."""
    from sklearn.neighbors import KNeighborsClassifier

    knn = KNeighborsClassifier(n_neighbors=k)
    knn.fit(e_train.detach().cpu().double().numpy(), y_train.cpu().numpy())
    return float(knn.score(e_test.detach().cpu().double().numpy(), y_test.cpu().numpy()))


def _evaluate(backbone: nn.Module, head: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """Embeddings and responsibilities of `x` in evaluation mode (BatchNorm's running
    statistics)."""
    backbone.eval()
    try:
        with torch.no_grad():
            e = backbone(x)
            return e, torch.softmax(-head(e), dim=-1)
    finally:
        backbone.train()


def _uniform(r: Tensor, y: Tensor) -> Tensor:
    """Every input spread equally over the components (prototypes that coincide)."""
    return torch.full_like(r, 1.0 / r.shape[1])


def _one_takes_all(r: Tensor, y: Tensor) -> Tensor:
    """Every input given to the first component."""
    out = torch.zeros_like(r)
    out[:, 0] = 1.0
    return out


def _dealt(r: Tensor, y: Tensor) -> Tensor:
    """Input i given to component i mod K: every component an equal share, each input one."""
    index = torch.arange(r.shape[0], device=r.device) % r.shape[1]
    return torch.nn.functional.one_hot(index, r.shape[1]).to(r.dtype)


PLANTS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "coincident": _uniform,
    "one_takes_all": _one_takes_all,
    "dealt": _dealt,
}
"""What a control plants in place of the trained network's held-out responsibilities `r[N, K]`
(given the labels `y[N]`)."""


def train_arm(images: Images, arm: str, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """Train arm `arm` from seed `seed` on `config["steps"]` batches of the training images.

    Returns `final`: the held-out component use, the k-NN accuracy of the trained and of the
    untrained embedding, the mean loss of the first and of the last tenth of the steps and the
    embedding's spread (mean standard deviation of its features over the test images);
    `curve`: the component use over training; `planted`: the component use under each plant."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {sorted(ARMS)}, got {arm!r}")
    spec = ARMS[arm]
    begin = seeded_start(images, spec.norm, seed, config)
    backbone, generator, start, device = begin.backbone, begin.generator, begin.first, begin.device
    n = len(images.y_train)
    with torch.no_grad():
        head = PrototypeHead.from_embeddings(
            backbone(images.x_train[start]), config["components"], generator
        ).to(device)
    probe = images.x_train[: config["probe_train"]], images.y_train[: config["probe_train"]]
    x_test, y_test = images.x_test, images.y_test
    monitor = x_test[: config["monitor"]]
    k_nn = config["knn"]
    untrained = knn_accuracy(
        _evaluate(backbone, head, probe[0])[0],
        probe[1],
        _evaluate(backbone, head, x_test)[0],
        y_test,
        k_nn,
    )
    decay = config["weight_decay"] if spec.weight_decay else 0.0
    optimizer = encoder_optimizer([*backbone.parameters(), *head.parameters()], config["lr"], decay)
    dead_mass = config["dead_mass"]
    curve: dict[str, list[float]] = {"step": [], "distinct": [], "effective": []}
    losses: list[float] = []
    steps = config["steps"]
    for step, index in enumerate(minibatches(n, config["batch"], steps, generator)):
        if step % config["curve_every"] == 0:
            use = component_use(_evaluate(backbone, head, monitor)[1], dead_mass)
            curve["step"].append(step)
            curve["distinct"].append(use["distinct"])
            curve["effective"].append(use["effective"])
        loss = arm_loss(head(backbone(images.x_train[index.to(device)])), arm, config)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    e_test, r_test = _evaluate(backbone, head, x_test)
    final = component_use(r_test, dead_mass)
    planted = {
        name: component_use(plant(r_test, y_test), dead_mass) for name, plant in PLANTS.items()
    }
    curve["step"].append(steps)
    curve["distinct"].append(final["distinct"])
    curve["effective"].append(final["effective"])
    e_probe, _ = _evaluate(backbone, head, probe[0])
    final["knn"] = knn_accuracy(e_probe, probe[1], e_test, y_test, k_nn)
    final["knn_untrained"] = untrained
    window = max(1, steps // 10)
    final["loss_start"] = sum(losses[:window]) / window
    final["loss_end"] = sum(losses[-window:]) / window
    final["embedding_scale"] = float(e_test.std(dim=0).mean())
    return {"final": final, "curve": curve, "planted": planted}

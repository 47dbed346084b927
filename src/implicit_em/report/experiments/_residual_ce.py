r"""E19's supervised trainings: the same pre-norm residual MLP, read by one prototype per class
and trained by cross-entropy over the distances, where the paper puts normalization layers.

§6.2 places the missing volume term in the networks practitioners train ("cross-entropy and
attention softmax operate on distances or scores with no explicit volume penalty"). Each arm
(`CE_ARMS`) trains `_residual_mlp.PreNormResidualMLP` and a `PrototypeHead` of $C$ class
prototypes $\mu_c$ (placed at the start on the class means of a batch's embeddings) by the
cross-entropy of the labels under the responsibilities $r = \operatorname{softmax}(-d)$,
$d_c = \lVert e(x) - \mu_c\rVert^2$:
$$L = -\frac1B\sum_b \log r_{y_b}(x_b) = \frac1B\sum_b \Big(d_{y_b}(x_b) + \log\sum_c e^{-d_c(x_b)}\Big),$$
with Adam:

* `bare`: no normalization;
* `layernorm`, `batchnorm`: LayerNorm (affine) or BatchNorm (affine) in every block and at the
  output;
* `weight_decay`: no normalization, AdamW's decoupled weight decay;
* `log_det`: no normalization, plus the explicit volume term
  $\lambda\,[-\log\det(\operatorname{Cov}_b e + \varepsilon I)]$ of the batch's embeddings
  (`objectives.log_det_penalty`), whose gradient
  $-\frac{2\lambda}{B-1}(\Sigma_b + \varepsilon I)^{-1}(e_b - \bar e)$ pushes the embedding
  apart along its thinnest directions.

Every arm but `bare` is the bare network with one mechanism added. `train_ce_arm` returns the
held-out embedding's volume (`_embedding_volume`), the test accuracy (does the arm work on its
own task?), the component use of the held-out responsibilities $r = \operatorname{softmax}(-d)$
over the $C$ classes (`_component_use`), and both readings of the same embedding as each of
`CE_PLANTS` replaces it (what the known-answer controls read).

The collapse §6.2 names is read from the responsibilities, not from the embedding's rank:
"the network can learn to map all inputs to nearby points, collapsing the distance structure
and making the responsibilities meaningless", and "a component that captures slightly more mass
receives stronger gradients ... and may come to dominate completely". Its measure is the
**dominance** $\max_c \bar r_c$, $\bar r_c = \frac1N\sum_i r_{ic}$: the largest share of the
held-out responsibility mass any one prototype takes. On the balanced test classes a network that
tells them apart reads near $1/C$; inputs mapped near one point give every input the same
$r_i$, and the prototype nearest that point takes its share from every input ($\to 1$ as the
point's distances to the prototypes spread). The embedding's effective rank is shown beside
it: cross-entropy folds each class onto its prototype (neural collapse), so a low rank with
accurate, class-telling responsibilities is the objective's own optimum, not this collapse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.objectives import log_det_penalty
from implicit_em.report.experiments._collapse_baselines import encoder_optimizer
from implicit_em.report.experiments._component_use import component_use
from implicit_em.report.experiments._embedding_volume import embedding_volume, spectrum
from implicit_em.report.experiments._neural import Images, minibatches
from implicit_em.report.experiments._residual_mlp import PrototypeHead, seeded_start

__all__ = ["CE_ARMS", "CE_PLANTS", "CeArm", "ce_loss", "dominance", "train_ce_arm"]

EMBEDDING_EPS = 1e-4
"""$\\varepsilon$ of the embedding's log-det."""


@dataclass(frozen=True)
class CeArm:
    """One supervised training: its label, the backbone's normalization, whether the log-det of
    the embedding is added and whether AdamW decays the weights."""

    label: str
    norm: str = "none"
    log_det: bool = False
    weight_decay: bool = False


CE_ARMS = {
    "bare": CeArm("no normalization, cross-entropy alone"),
    "layernorm": CeArm("LayerNorm (affine), cross-entropy", norm="layernorm"),
    "batchnorm": CeArm("BatchNorm, cross-entropy", norm="batchnorm"),
    "weight_decay": CeArm("weight decay, cross-entropy", weight_decay=True),
    "log_det": CeArm("cross-entropy + log-det of the embedding", log_det=True),
}
"""The arms by key: the network without normalization, each patch the paper names, and the
explicit volume term, each added to the same bare network."""


def ce_loss(e: Tensor, d: Tensor, y: Tensor, arm: str, config: dict[str, Any]) -> Tensor:
    """The training objective of `arm` on a batch: embeddings `e[B, D]`, distances `d[B, C]`,
    labels `y[B]`."""
    if arm not in CE_ARMS:
        raise ValueError(f"arm must be one of {sorted(CE_ARMS)}, got {arm!r}")
    loss = F.cross_entropy(-d, y)
    if CE_ARMS[arm].log_det:
        loss = loss + config["ce_log_det_weight"] * scale_free_log_det(e)
    return loss


def scale_free_log_det(e: Tensor) -> Tensor:
    r"""The volume term at a fixed scale: $-\log\det(\Sigma_b / \bar\sigma^2 + \varepsilon I)$,
    with $\Sigma_b$ the covariance of the batch's embeddings `e[B, D]` and
    $\bar\sigma^2 = \operatorname{tr}\Sigma_b / D$ their mean variance. At $\varepsilon = 0$ it is
    $-\sum_j \log(D p_j) \ge 0$ ($p$ the spectrum), zero only when every direction carries the
    same variance; a direction the data no longer vary along costs $-\log\varepsilon$. Growing
    the embedding as a whole changes nothing, so, unlike $-\log\det(\Sigma_b + \varepsilon I)$,
    it cannot be lowered without bound by scaling the network's output (which cross-entropy over
    distances also rewards)."""
    scale = e.var(dim=0).mean().clamp_min(1e-12)
    return log_det_penalty(e / scale.sqrt(), EMBEDDING_EPS)


POINT_SHRINK = 0.01
"""How far the planted collapse leaves each input from the embedding's mean: a hundredth of its
offset (every input mapped near one point)."""


def _whitened(e: Tensor) -> Tensor:
    """`e` whitened: every direction of the embedding given the same variance."""
    centred = e.double() - e.double().mean(0, keepdim=True)
    lam = spectrum(e).clamp_min(1e-12)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    return (centred @ v.T @ torch.diag(lam.rsqrt()) @ v).to(e.dtype)


def _near_a_point(e: Tensor) -> Tensor:
    r"""`e` shrunk onto its mean: $\bar e + s\,(e_i - \bar e)$, $s$ = `POINT_SHRINK` (the
    paper's collapse, every input mapped to nearby points, planted)."""
    mean = e.mean(0, keepdim=True)
    return mean + POINT_SHRINK * (e - mean)


CE_PLANTS: dict[str, Callable[[Tensor], Tensor]] = {"whitened": _whitened, "point": _near_a_point}
"""What a control plants in place of a trained network's held-out embeddings `e[N, D]`: the
same embedding spread equally over every direction, or every input mapped near one point."""


def _readings(e: Tensor, head: nn.Module, dead_mass: float) -> dict[str, float]:
    r"""The volume of the held-out embeddings `e` and the component use of their responsibilities
    $\operatorname{softmax}(-d)$ under the trained `head`."""
    with torch.no_grad():
        d = head(e)
    r = torch.softmax(-d, dim=-1).cpu()
    return {
        **component_use(r, dead_mass),
        **embedding_volume(e),
        "dominance": dominance(d.argmin(-1).cpu(), d.shape[-1]),
    }


def dominance(nearest: Tensor, classes: int) -> float:
    r"""The largest share of the inputs any one prototype is nearest to:
    $\max_c \frac1N \#\{i : \arg\min_k d_{ik} = c\}$ of the nearest prototypes
    `nearest[N]` among `classes`; $1/C$ for balanced classes each given to its own prototype,
    1 when one prototype takes every input."""
    if nearest.dim() != 1 or nearest.numel() == 0:
        raise ValueError(f"nearest must be a non-empty [N] tensor, got {tuple(nearest.shape)}")
    counts = torch.bincount(nearest, minlength=classes)
    return float(counts.max()) / nearest.numel()


def _evaluate(backbone: nn.Module, x: Tensor) -> Tensor:
    backbone.eval()
    try:
        with torch.no_grad():
            return backbone(x)
    finally:
        backbone.train()


def _class_means(e: Tensor, y: Tensor, classes: int) -> Tensor:
    """`[classes, D]`: the mean embedding of each class in the batch (0 for an absent class)."""
    sums = torch.zeros(classes, e.shape[1], dtype=e.dtype, device=e.device).index_add_(0, y, e)
    counts = torch.bincount(y, minlength=classes).clamp_min(1).to(e.dtype)
    return sums / counts[:, None]


def train_ce_arm(images: Images, arm: str, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """Train arm `arm` from seed `seed` on `config["ce_steps"]` labelled batches.

    Returns `final`: the held-out embedding's volume, the test accuracy (argmin distance), the
    mean loss of the first and of the last tenth of the steps and the embedding's mean feature
    standard deviation; `planted`: the same readings of the held-out embedding under each
    plant."""
    if arm not in CE_ARMS:
        raise ValueError(f"arm must be one of {sorted(CE_ARMS)}, got {arm!r}")
    spec = CE_ARMS[arm]
    begin = seeded_start(images, spec.norm, seed, config)
    backbone, generator, start, device = begin.backbone, begin.generator, begin.first, begin.device
    classes = len(images.classes)
    n = len(images.y_train)
    with torch.no_grad():
        means = _class_means(backbone(images.x_train[start]), images.y_train[start], classes)
    head = PrototypeHead(means).to(device)
    start_volume = embedding_volume(_evaluate(backbone, images.x_test))
    decay = config["weight_decay"] if spec.weight_decay else 0.0
    optimizer = encoder_optimizer([*backbone.parameters(), *head.parameters()], config["lr"], decay)
    losses: list[float] = []
    steps = config["ce_steps"]
    for index in minibatches(n, config["batch"], steps, generator):
        index = index.to(device)
        e = backbone(images.x_train[index])
        loss = ce_loss(e, head(e), images.y_train[index], arm, config)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    e_test = _evaluate(backbone, images.x_test)
    with torch.no_grad():
        accuracy = float((head(e_test).argmin(-1) == images.y_test).double().mean())
    final = _readings(e_test, head, config["dead_mass"])
    window = max(1, steps // 10)
    final.update(
        rank_start=start_volume["effective_rank"],
        rank_ratio=final["effective_rank"] / start_volume["effective_rank"],
        accuracy=accuracy,
        loss_start=sum(losses[:window]) / window,
        loss_end=sum(losses[-window:]) / window,
        embedding_scale=float(e_test.std(dim=0).mean()),
    )
    planted = {
        name: _readings(plant(e_test), head, config["dead_mass"])
        for name, plant in CE_PLANTS.items()
    }
    return {"final": final, "planted": planted}

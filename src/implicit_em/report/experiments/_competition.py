r"""Competition between components, measured so that neither the start nor the algebra decides it.

Shared by E4 (prototypes) and E7 (classification heads):

* **Controlled starts.** `one_cluster_start` puts every prototype on rows of one cluster;
  `coverage` counts the true centres with a prototype nearby, so that coverage *gained* (end
  minus start) is what an objective did, not what its initialization landed on.
* **Supervised heads over distances.** `head_loss` gives the normalized cross-entropy and
  two unnormalized comparators with proper negatives and a shared bias $b$: one-vs-rest
  sigmoids $\sum_j \mathrm{BCE}(\sigma(b - d_j), 1[j = y])$ and the squared error of the
  radial-basis outputs $e^{b - d_j}$ against the one-hot target (an RBF network's loss).
* **Coupling through a shared encoder.** In the distances alone the question is algebra: a
  one-vs-rest sigmoid's $\partial\ell_i/\partial d_{ij} = \sigma(b - d_{ij})$ depends on
  $d_{ij}$ alone, cross-entropy's $-r_{ij}$ on every distance. `encoder_coupling` asks it in
  parameter space instead: the wrong classes' part of the update that input $i$ sends to the
  shared encoder's weights $\theta$,
  $\bigl\lVert \sum_{j\ne y_i} \tfrac{\partial\ell_i}{\partial d_{ij}}
  \tfrac{\partial d_{ij}}{\partial\theta} \bigr\rVert$, rank-correlated with the correct
  class's distance $d_{iy_i}$ within narrow bins of the nearest wrong class's distance. It
  reads the trained geometry as well as the loss (the features, the prototypes' layout, the
  encoder's Jacobian), so for no head is its value fixed by the algebra.
* **Competition among the wrong classes.** `wrong_class_competition`: whether a wrong class's
  correction $\lvert\partial\ell_i/\partial d_{ik}\rvert$ grows as the nearest *other* wrong
  class recedes, at a fixed distance $d_{ik}$ of its own. Under cross-entropy the wrong classes
  split one normalized budget, $r_{ik} = e^{-d_{ik}}/\sum_j e^{-d_{ij}}$; under one-vs-rest
  sigmoids $\sigma(b - d_{ik})$ a class's correction depends on its own distance alone. How much
  the other wrong classes matter in a trained model (rather than the correct class, which
  dominates the sum once it is fit) is what the held-out distances decide.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import Tensor, nn

from implicit_em.objectives import cross_entropy, sigmoid_bce

__all__ = [
    "HEAD_LOSSES",
    "blobs",
    "coverage",
    "encoder_coupling",
    "head_confidence",
    "head_gradient",
    "head_loss",
    "held_out_measures",
    "mlp_update_norm",
    "one_cluster_start",
    "wrong_class_competition",
    "wrong_class_feature_gradient",
]

HEAD_LOSSES = ("ce", "ovr_sigmoid", "mse")


def blobs(n: int, seed: int) -> tuple[Tensor, np.ndarray, Tensor]:
    """Four 2-D clusters (std 0.6) at the corners of a square of side 5: rows `[n, 2]`
    (float32), labels and centres."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0], [5.0, 5.0]])
    labels = rng.integers(0, 4, size=n)
    x = centres[labels] + 0.6 * rng.standard_normal((n, 2))
    return torch.tensor(x, dtype=torch.float32), labels, torch.tensor(centres, dtype=torch.float32)


def one_cluster_start(
    x: Tensor, labels: np.ndarray, k: int, seed: int, *, cluster: int | None = None
) -> Tensor:
    """`k` prototypes drawn with `seed` from the rows of one cluster: `cluster`, or one drawn
    with `seed`.

    Raises
    ------
    ValueError
        If the cluster has fewer than `k` rows.
    """
    generator = torch.Generator().manual_seed(seed)
    clusters = np.unique(labels)
    chosen = (
        clusters[int(torch.randint(len(clusters), (1,), generator=generator))]
        if cluster is None
        else cluster
    )
    rows = torch.arange(len(x))[torch.as_tensor(labels == chosen)]
    if len(rows) < k:
        raise ValueError(f"a one-cluster start needs {k} rows to draw from, got {len(rows)}")
    return x[rows[torch.randperm(len(rows), generator=generator)[:k]]].clone()


def coverage(prototypes: Tensor, centres: Tensor, radius: float) -> int:
    """How many true `centres` have at least one prototype within `radius`."""
    return int((torch.cdist(centres, prototypes).amin(1) < radius).sum())


def head_loss(
    name: str, d: Tensor, y: Tensor, smoothing: float = 0.0, bias: Tensor | float = 0.0
) -> Tensor:
    """The mean supervised loss `name` over distances `d[N, K]` and labels `y[N]`.

    `ce`: cross-entropy over distances (label smoothing `smoothing`); `ovr_sigmoid`: one
    sigmoid per class on $b - d$ with the shared bias $b$ = `bias`, the other classes as
    negatives; `mse`: squared error of $e^{b - d}$ against the one-hot target. Only `ce` takes a `smoothing` (the
    comparators have no normalized target to smooth).

    Raises
    ------
    ValueError
        If `name` is unknown, or `smoothing` is set for a comparator.
    """
    if name == "ce":
        return cross_entropy(d, y, label_smoothing=smoothing)
    if smoothing:
        raise ValueError(f"label smoothing applies to 'ce' only, got smoothing={smoothing}")
    if name == "ovr_sigmoid":
        return sigmoid_bce(d, y, bias=bias)
    if name == "mse":
        target = torch.nn.functional.one_hot(y, d.shape[-1]).to(d.dtype)
        return ((torch.exp(bias - d) - target) ** 2).sum(-1).mean()
    raise ValueError(f"name must be one of {HEAD_LOSSES}, got {name!r}")


def head_confidence(name: str, d: Tensor, bias: Tensor | float = 0.0) -> tuple[Tensor, Tensor]:
    """The predicted class and the head's own confidence in it, in [0, 1].

    `ce`: softmax of $-d$; `ovr_sigmoid`: the largest $\\sigma(b - d_j)$; `mse`: the
    largest $e^{b - d_j}$ clipped to 1.
    """
    if name == "ce":
        p = torch.softmax(-d, dim=-1)
    elif name == "ovr_sigmoid":
        p = torch.sigmoid(bias - d)
    elif name == "mse":
        p = torch.exp(bias - d).clamp(max=1.0)
    else:
        raise ValueError(f"name must be one of {HEAD_LOSSES}, got {name!r}")
    confidence, predicted = p.max(-1)
    return predicted, confidence


def head_gradient(name: str, d: Tensor, y: Tensor, bias: Tensor | float = 0.0) -> Tensor:
    r"""The per-sample gradients $\partial\ell_i/\partial d_{ij}$ `[N, K]` (float64) of the
    head loss `name` (no smoothing) at the distances `d[N, K]`."""
    d = d.detach().double().requires_grad_(True)
    bias = torch.as_tensor(bias, dtype=d.dtype).detach()
    (grad,) = torch.autograd.grad(head_loss(name, d, y, bias=bias) * len(d), d)
    return grad


def held_out_measures(name: str, d: Tensor, y: Tensor, bias: Tensor | float = 0.0) -> dict:
    """Accuracy and expected calibration error (15 bins) of a trained head on held-out
    distances `d[N, K]` and labels `y[N]`."""
    from implicit_em.report.experiments._neural import expected_calibration_error

    predicted, confidence = head_confidence(name, d.detach().double(), bias)
    correct = predicted == y
    return {
        "accuracy": float(correct.double().mean()),
        "ece": expected_calibration_error(confidence, correct, bins=15),
    }


def wrong_class_feature_gradient(
    grad_d: Tensor, h: Tensor, prototypes: Tensor, labels: Tensor
) -> Tensor:
    r"""$v_i = \sum_{j \ne y_i} g_{ij}\,\partial d_{ij}/\partial h_i
    = 2\sum_{j\ne y_i} g_{ij}(h_i - \mu_j)$ `[N, F]` for $d_{ij} = \lVert h_i-\mu_j\rVert^2$,
    from the per-sample gradients `grad_d[N, K]`, features `h[N, F]` and prototypes `[K, F]`."""
    wrong = torch.ones_like(grad_d, dtype=torch.bool).scatter(1, labels[:, None], False)
    g = torch.where(wrong, grad_d, torch.zeros_like(grad_d))
    return 2.0 * (g.sum(1, keepdim=True) * h - g @ prototypes)


@torch.no_grad()
def mlp_update_norm(hidden: nn.Linear, out: nn.Linear, x: Tensor, v: Tensor) -> Tensor:
    r"""Per input, the norm of the gradient that the upstream gradient $v_i$ at the output of
    the one-hidden-layer map $h = W_2\,\mathrm{relu}(W_1x + b_1) + b_2$ sends to
    $(W_1, b_1, W_2, b_2)$: with $a_i = \mathrm{relu}(W_1x_i + b_1)$ and
    $\delta_i = (W_2^\top v_i)\odot 1[W_1x_i + b_1 > 0]$,
    $\lVert\cdot\rVert^2 = \lVert v_i\rVert^2(\lVert a_i\rVert^2 + 1)
    + \lVert\delta_i\rVert^2(\lVert x_i\rVert^2 + 1)$ (outer products factor). `[N]`."""
    z = hidden(x).double()
    a = torch.relu(z)
    v = v.double()
    delta = (v @ out.weight.double()) * (z > 0)
    squared = (v * v).sum(1) * ((a * a).sum(1) + 1) + (delta * delta).sum(1) * (
        (x.double() ** 2).sum(1) + 1
    )
    return squared.sqrt()


def encoder_coupling(update_norm: Tensor, d: Tensor, labels: Tensor, bins: int = 20) -> float:
    r"""Mean within-bin Spearman correlation of the wrong classes' encoder update
    `update_norm[N]` with the correct class's distance $d_{iy_i}$, in `bins` equal-count bins of
    the nearest wrong class's distance $\min_{j\ne y_i} d_{ij}$; bins with fewer than 10 inputs
    or a constant side are skipped, the rest weighted by their inputs. NaN when none
    qualifies."""
    n = d.shape[0]
    if update_norm.shape != (n,) or labels.shape != (n,):
        raise ValueError("update_norm and labels must be [N] for d [N, K]")
    correct = d.gather(1, labels[:, None])[:, 0].double().cpu().numpy()
    nearest_wrong = d.scatter(1, labels[:, None], float("inf")).amin(1).double().cpu().numpy()
    return _within_bin_spearman(nearest_wrong, update_norm.double().cpu().numpy(), correct, bins)


def _within_bin_spearman(key: np.ndarray, a: np.ndarray, b: np.ndarray, bins: int) -> float:
    """Mean Spearman correlation of `a` with `b` within `bins` equal-count bins of `key`; bins
    with fewer than 10 entries or a constant side are skipped, the rest weighted by their
    entries. NaN when none qualifies."""
    order = np.argsort(key, kind="stable")
    total, weight = 0.0, 0
    for chunk in np.array_split(order, bins):
        if len(chunk) < 10 or np.ptp(a[chunk]) == 0 or np.ptp(b[chunk]) == 0:
            continue
        total += len(chunk) * float(spearmanr(a[chunk], b[chunk]).statistic)
        weight += len(chunk)
    return total / weight if weight else float("nan")


def wrong_class_competition(grad_d: Tensor, d: Tensor, labels: Tensor, bins: int = 20) -> float:
    r"""Whether the wrong classes compete for the correction, from per-sample gradients
    `grad_d[N, K]` at distances `d[N, K]` (`K` >= 3) with labels `[N]`.

    Every (input $i$, wrong class $k$) pair gives the correction $\lvert g_{ik}\rvert$, its own
    distance $d_{ik}$ and the distance of the nearest other wrong class,
    $\min_{j\ne y_i,k} d_{ij}$. Returned: the mean within-bin Spearman correlation of the
    correction with that rival distance, in `bins` equal-count bins of the own distance
    (`_within_bin_spearman`). Positive: a wrong class is corrected more when its rivals are
    farther (they share one budget); about 0: each class's correction follows its own distance
    alone."""
    n, k = d.shape
    if k < 3 or grad_d.shape != (n, k) or labels.shape != (n,):
        raise ValueError(
            "wrong_class_competition needs d and grad_d [N, K] with K >= 3, labels [N]"
        )
    wrong = torch.ones_like(d, dtype=torch.bool).scatter(1, labels[:, None], False)
    own = d[wrong].view(n, k - 1).double()
    correction = grad_d[wrong].view(n, k - 1).abs().double()
    self_pair = torch.eye(k - 1, dtype=torch.bool, device=d.device)
    rival = own[:, None, :].expand(n, k - 1, k - 1).masked_fill(self_pair, float("inf")).amin(-1)
    return _within_bin_spearman(
        *(t.reshape(-1).cpu().numpy() for t in (own, correction, rival)), bins=bins
    )

r"""Competition between components, measured so that the start and the algebra cannot decide it.

Shared by E4 (prototypes) and E7 (classification heads):

* **Controlled starts.** `controlled_start` puts every prototype in one cluster (`one_cluster`)
  or draws more prototypes than there are clusters (`overcomplete`); `coverage` counts the true
  centres with a prototype nearby, so that coverage *gained* (end minus start) is what an
  objective did, not what its initialization landed on.
* **Supervised heads over distances.** `head_loss` gives the normalized cross-entropy and
  two unnormalized comparators with proper negatives and a shared bias $b$: one-vs-rest
  sigmoids $\sum_j \mathrm{BCE}(\sigma(b - d_j), 1[j = y])$ and the squared error of the
  radial-basis outputs $e^{b - d_j}$ against the one-hot target (an RBF network's loss).
* **Coupling between classes.** Under a normalized objective the update a wrong class $j$
  receives from input $i$ depends on the other classes' distances: for cross-entropy
  $\partial\ell_i/\partial d_{ij} = -r_{ij} = -e^{-d_{ij}}/\sum_k e^{-d_{ik}}$, which grows
  with the correct class's distance $d_{iy}$ at a fixed $d_{ij}$ (explaining away). For the
  unnormalized comparators it is a function of $d_{ij}$ alone. `class_coupling` measures, on
  a trained model's held-out inputs, the rank correlation between $|\partial\ell_i/\partial
  d_{ij}|$ and $d_{iy}$ within narrow bins of $d_{ij}$: how strongly a class's update is
  coupled to another class's fit. Its size depends on what training made of the distances (a
  confident model has little left to couple), so it is not fixed by the algebra.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import Tensor

from implicit_em.objectives import cross_entropy, sigmoid_bce

__all__ = [
    "HEAD_LOSSES",
    "START_KINDS",
    "blobs",
    "class_coupling",
    "controlled_start",
    "coverage",
    "head_confidence",
    "head_loss",
    "held_out_measures",
]

START_KINDS = ("one_cluster", "overcomplete")
HEAD_LOSSES = ("ce", "ovr_sigmoid", "mse")


def blobs(n: int, seed: int) -> tuple[Tensor, np.ndarray, Tensor]:
    """Four 2-D clusters (std 0.6) at the corners of a square of side 5: rows `[n, 2]`
    (float32), labels and centres."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0], [5.0, 5.0]])
    labels = rng.integers(0, 4, size=n)
    x = centres[labels] + 0.6 * rng.standard_normal((n, 2))
    return torch.tensor(x, dtype=torch.float32), labels, torch.tensor(centres, dtype=torch.float32)


def controlled_start(
    x: Tensor, labels: np.ndarray, k: int, kind: str, seed: int, *, cluster: int | None = None
) -> Tensor:
    """`k` prototypes drawn from the rows of `x`, with their placement controlled.

    `one_cluster`: all from the rows of one cluster (`cluster`, or one drawn with `seed`);
    `overcomplete`: from all rows (the caller asks for more prototypes than clusters).

    Raises
    ------
    ValueError
        If `kind` is unknown or the rows drawn from are fewer than `k`.
    """
    if kind not in START_KINDS:
        raise ValueError(f"kind must be one of {START_KINDS}, got {kind!r}")
    generator = torch.Generator().manual_seed(seed)
    rows = torch.arange(len(x))
    if kind == "one_cluster":
        clusters = np.unique(labels)
        chosen = (
            clusters[int(torch.randint(len(clusters), (1,), generator=generator))]
            if cluster is None
            else cluster
        )
        rows = rows[torch.as_tensor(labels == chosen)]
    if len(rows) < k:
        raise ValueError(f"{kind} start needs {k} rows to draw from, got {len(rows)}")
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


def held_out_measures(name: str, d: Tensor, y: Tensor, bias: Tensor | float = 0.0) -> dict:
    """Accuracy, expected calibration error (15 bins) and [class_coupling][] of a trained head
    on held-out distances `d[N, K]` and labels `y[N]`, with the per-sample gradients of the
    loss `name` (no smoothing) in `d`."""
    from implicit_em.report.experiments._neural import expected_calibration_error

    d = d.detach().double().requires_grad_(True)
    bias = torch.as_tensor(bias, dtype=d.dtype).detach()
    (grad,) = torch.autograd.grad(head_loss(name, d, y, bias=bias) * len(d), d)
    predicted, confidence = head_confidence(name, d.detach(), bias)
    correct = predicted == y
    return {
        "accuracy": float(correct.double().mean()),
        "ece": expected_calibration_error(confidence, correct, bins=15),
        "coupling": class_coupling(grad, d.detach(), y),
    }


def class_coupling(grad: Tensor, d: Tensor, labels: Tensor, bins: int = 20) -> float:
    """Mean within-bin Spearman correlation of $|g_{ij}|$ with $d_{iy_i}$ over wrong classes.

    `grad[N, K]` holds the per-sample gradients $\\partial\\ell_i/\\partial d_{ij}$, `d[N, K]`
    the distances and `labels[N]` the classes. The wrong-class pairs $(i, j \\ne y_i)$ are cut
    into `bins` equal-count bins of $d_{ij}$; in each bin with at least 10 pairs and no
    constant side, the rank correlation of $|g_{ij}|$ with $d_{iy_i}$ is taken, and the bins
    are averaged weighted by their pairs. NaN when no bin qualifies.
    """
    n, k = d.shape
    if grad.shape != d.shape or labels.shape != (n,):
        raise ValueError("grad and d must be [N, K] and labels [N]")
    wrong = torch.ones(n, k, dtype=torch.bool, device=d.device)
    wrong[torch.arange(n, device=d.device), labels] = False
    own = d[wrong].double().cpu().numpy()
    magnitude = grad[wrong].abs().double().cpu().numpy()
    correct = d.gather(1, labels[:, None]).expand(n, k)[wrong].double().cpu().numpy()
    order = np.argsort(own, kind="stable")
    total, weight = 0.0, 0
    for chunk in np.array_split(order, bins):
        m, c = magnitude[chunk], correct[chunk]
        if len(chunk) < 10 or np.ptp(m) == 0 or np.ptp(c) == 0:
            continue
        total += len(chunk) * float(spearmanr(m, c).statistic)
        weight += len(chunk)
    return total / weight if weight else float("nan")

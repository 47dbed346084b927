r"""E18's measurements: four heads on one backbone, their confidence out of distribution and
their calibration in distribution.

The heads (`HEADS`) share E8's MLP encoder and training (`_open_set.train_model`) and differ only
in how the logits $z \in \mathbb{R}^K$ become probabilities:

* softmax (cross-entropy): $p_k = e^{z_k} / \sum_j e^{z_j}$, normalized across the classes;
* one-vs-rest sigmoids (binary cross-entropy per class): $p_k = \sigma(z_k)$, each class on its
  own, so every $p_k$ can be small at once;
* prototype (distance) head: $z_k = -\lVert h - \mu_k\rVert^2$, $p = \operatorname{softmax}(z)$,
  the paper's distance model, normalized like the softmax head;
* prototype head with a "none of the above" component (`null`): a learnable constant distance
  $d_0$ appended, $p = \operatorname{softmax}([z, -d_0])$ over $K + 1$ components, trained with
  cross-entropy against $(1-\varepsilon)e_y + \varepsilon e_0$: the known classes' mass
  $\sum_{k \le K} p_k = 1 - r_0$ may fall below one, so the head can abstain.

A head's confidence on an input is its largest probability of a known class, $\max_{k \le K}
p_k$ (for the sigmoid head the largest sigmoid). Out of distribution it is read as the mean over
the inputs and as the share of inputs given to a class with confidence at least `CONFIDENT`; in
distribution as the expected calibration error over 15 equal-width bins against whether the
argmax is the label. For the normalized heads the largest deviation of
$\sum_k p_k$ from one on the out-of-distribution inputs is kept (the closed world's algebra, a
gate), and for the null head the mean known-class mass $1 - r_0$ there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.nn import Module

from implicit_em.report.experiments._neural import expected_calibration_error
from implicit_em.report.experiments._open_set import train_model
from implicit_em.report.experiments._open_set_splits import OpenSetSplit

__all__ = [
    "CONFIDENT",
    "ECE_BINS",
    "HEADS",
    "NORMALIZED",
    "OOD_SETS",
    "Confidence",
    "confidence_reading",
    "head_logits",
    "max_probability",
    "measure_head",
    "read_head",
    "train_head",
]

HEADS = {
    "softmax": "softmax head (cross-entropy)",
    "sigmoid": "one-vs-rest sigmoid head (binary cross-entropy)",
    "distance": "prototype head (softmax over −‖h − μ‖²)",
    "null": "prototype head + none of the above (constant d₀)",
}
NORMALIZED = ("softmax", "distance")
"""The heads whose probabilities over the known classes sum to one (the closed world)."""
CONFIDENT = 0.9
"""An input counts as confidently assigned when its head's confidence is at least this."""
ECE_BINS = 15
OOD_SETS = ("near", "far")

Confidence = Callable[[Tensor], Tensor]
"""Logits `[N, K]` to each row's confidence `[N]`."""


def max_probability(kind: str) -> Confidence:
    """The confidence of head `kind`: the largest softmax probability of its logits, for the
    sigmoid head the largest sigmoid, and for the null head the largest known-class
    probability of the softmax over its $K + 1$ logits (the null's last, `head_logits`)."""
    if kind not in HEADS:
        raise ValueError(f"kind must be one of {sorted(HEADS)}, got {kind!r}")
    if kind == "sigmoid":
        return lambda z: torch.sigmoid(z).amax(-1)
    if kind == "null":
        return lambda z: torch.softmax(z, dim=-1)[..., :-1].amax(-1)
    return lambda z: torch.softmax(z, dim=-1).amax(-1)


def head_logits(model: Module, x: Tensor) -> Tensor:
    """The logits of `model` on `x` in float64, `[N, K]`, with the null's logit $-d_0$ appended
    as column $K$ for a head with a null component (`[N, K + 1]`)."""
    with torch.no_grad():
        h, z = model(x)
        z = z.double()
        if getattr(model, "null", None) is None:
            return z
        return torch.cat([z, -model.null_distance(h).double()[:, None]], dim=-1)


def confidence_reading(confidence: Tensor) -> dict[str, float]:
    """`mean`: the mean confidence; `share`: the share of rows at least `CONFIDENT` (compared in
    the confidence's own precision)."""
    confident = (confidence >= CONFIDENT).double()
    return {"mean": float(confidence.double().mean()), "share": float(confident.mean())}


def train_head(kind: str, split: OpenSetSplit, seed: int, config: dict[str, Any]) -> Module:
    r"""Head `kind` on E8's encoder, trained on `split`'s known classes from initialization
    `seed` (`_open_set.train_model`); the null head with the configuration's `null_target`
    $\varepsilon$, the others with none."""
    epsilon = config["null_target"] if kind == "null" else 0.0
    settings = {**config, "null_target": epsilon, "d0_init": 0.0}
    return train_model(kind, split.x_train, split.y_train, split.classes, seed, settings)


def read_head(model: Module, split: OpenSetSplit, confidence: Confidence) -> dict[str, Any]:
    """A trained head read with `confidence` from its `head_logits`: the in-distribution test
    `accuracy` (argmax over the known classes), `ece` (15 bins, against whether the argmax is
    the label) and mean `confidence_known`; for the `near` (held-out classes) and `far`
    (another data set) inputs the `confidence_reading`, the largest deviation of the softmax's
    sum over its columns from one (`sum_error`) and the mean mass of the known classes
    (`known_mass`: one for a closed world, $1 - r_0$ with a null)."""
    known = split.y_test >= 0
    z_known = head_logits(model, split.x_test[known])
    conf_known = confidence(z_known)
    correct = z_known[:, : split.classes].argmax(-1) == split.y_test[known]
    out: dict[str, Any] = {
        "accuracy": float(correct.double().mean()),
        "ece": expected_calibration_error(conf_known, correct, bins=ECE_BINS),
        "confidence_known": float(conf_known.mean()),
    }
    for where, x in (("near", split.x_test[~known]), ("far", split.x_far)):
        z = head_logits(model, x)
        p = torch.softmax(z, dim=-1)
        out[where] = {
            **confidence_reading(confidence(z)),
            "sum_error": float((p.sum(-1) - 1).abs().max()),
            "known_mass": float(p[:, : split.classes].sum(-1).mean()),
        }
    return out


def measure_head(
    kind: str, split: OpenSetSplit, seed: int, config: dict[str, Any]
) -> dict[str, Any]:
    """`read_head` of head `kind` trained on `split` from `seed`, read by its own
    `max_probability`."""
    return read_head(train_head(kind, split, seed, config), split, max_probability(kind))


def confidence_figure(
    measured: list[dict[str, Any]], heads: dict[str, str], out: Path, confident: float
) -> str:
    """Per out-of-distribution set (near, far), each head's mean max-probability on it, one dot
    per seed and a bar at their mean, with the confidence line `confident` for reference."""
    from implicit_em.report.rendering.figures import new_figure, save

    fig, axes = new_figure(ncols=len(OOD_SETS), width=3.4, height=3.0)
    for ax, where in zip(axes[0], OOD_SETS, strict=True):
        for i, kind in enumerate(heads):
            values = [m[kind][where]["mean"] for m in measured]
            ax.bar(i, sum(values) / len(values), color="#d0d7de", width=0.6)
            ax.plot([i] * len(values), values, "o", color="#0969da", markersize=4)
        ax.axhline(confident, color="#cf222e", linewidth=1, linestyle="--")
        ax.set_xticks(range(len(heads)), list(heads.values()), rotation=20, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"{where} out of distribution", fontsize=9)
        ax.set_ylabel("mean max-probability")
    return save(fig, out, "closed_world.png")

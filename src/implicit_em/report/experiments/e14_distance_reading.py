r"""E14 (m3): does an ordinary linear softmax head behave as distances?

Two predictions that the distance reading makes and the scores reading does not, stated in
`_distance_reading` and in the hypothesis below before any run, tested on linear heads over a
ReLU encoder trained by cross-entropy on images; a prototype (distance) head is the control.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from implicit_em.report.experiments import _distance_reading as dr
from implicit_em.report.experiments._neural import load_images, plus_minus
from implicit_em.report.figures import new_figure, save
from implicit_em.report.registry import Experiment, Figure, Outcome, Table
from implicit_em.report.units import unit

RISES = 0.5
"""Prediction 1 is decided by whether at least this share of inputs gains log-sum-exp far out."""
AGREES = 0.8
"""Prediction 2 is decided by whether the mean rank correlation reaches this."""


def _seed(config: dict[str, Any], head: str, seed: int) -> dict[str, Any]:
    images = load_images(config)
    classes = len(images.classes)
    model = dr.train_head(head, images.x_train, images.y_train, classes, seed, config)
    far = dr.far_from_data(model, images.x_test, config["scales"])
    with torch.no_grad():
        predicted = model(images.x_test)[1].argmax(1)
    return {
        **far,
        "accuracy": float((predicted == images.y_test).double().mean()),
        "rank_agreement": dr.rank_agreement(
            model, images.x_train, images.y_train, images.x_test, classes
        ),
    }


def run(config: dict[str, Any], out: Path) -> Outcome:
    runs = {
        head: [
            unit(f"{head}-seed{s}", lambda h=head, s=s: _seed(config, h, s))
            for s in config["seeds"]
        ]
        for head in dr.HEADS
    }
    numbers: dict[str, Any] = {"scales": config["scales"], "data": config["data"]}
    samples: dict[str, list[float]] = {}
    rows = []
    for head, per_seed in runs.items():
        for key in ("lse_rise_share", "rank_agreement", "accuracy"):
            samples[f"{key}_{head}"] = [r[key] for r in per_seed]
            numbers[f"{key}_{head}"] = float(np.mean(samples[f"{key}_{head}"]))
        far = [r["confidence"][-1] for r in per_seed]
        numbers[f"confidence_far_{head}"] = float(np.mean(far))
        rows.append(
            (
                head,
                plus_minus(samples[f"accuracy_{head}"]),
                plus_minus(samples[f"lse_rise_share_{head}"]),
                plus_minus(far),
                plus_minus(samples[f"rank_agreement_{head}"]),
            )
        )
    numbers["accuracy_min"] = min(samples["accuracy_linear"] + samples["accuracy_distance"])
    numbers["lse_rise_share_distance_max"] = max(samples["lse_rise_share_distance"])
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                f"Linear and distance heads on {config['data']} ({len(config['seeds'])} seeds, "
                f"mean ± std; inputs scaled by up to {config['scales'][-1]:g})",
                (
                    "head",
                    "test accuracy",
                    "share of inputs whose log Σ e^z rises far out",
                    f"confidence at scale {config['scales'][-1]:g}",
                    "rank agreement with a fitted Gaussian's −d",
                ),
                tuple(rows),
            )
        ],
        figures=[_figure(runs, out)],
        notes=[
            f"Prediction 1 (far from the data the density falls): linear head "
            f"{numbers['lse_rise_share_linear']:.1%} of inputs rise, distance head "
            f"{numbers['lse_rise_share_distance']:.1%}.",
            f"Prediction 2 (class order as a fitted distance model): mean Spearman "
            f"{numbers['rank_agreement_linear']:.3f} for the linear head.",
        ],
    )


def _figure(runs: dict[str, list[dict[str, Any]]], out: Path) -> Figure:
    fig, axes = new_figure(ncols=2, width=4.4, height=3.2)
    ax_lse, ax_conf = axes[0]
    colors = {"linear": "#cf222e", "distance": "#0969da"}
    for head, per_seed in runs.items():
        for i, r in enumerate(per_seed):
            label = f"{head} head" if i == 0 else None
            ax_lse.plot(r["scales"], r["lse"], color=colors[head], marker=".", label=label)
            ax_conf.plot(r["scales"], r["confidence"], color=colors[head], marker=".", label=label)
    for ax in (ax_lse, ax_conf):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input scale λ (x → λx, data centred)")
        ax.legend(fontsize=7)
    ax_lse.set_ylabel("mean log Σ e^z")
    ax_conf.set_ylabel("mean max softmax")
    name = save(fig, out, "e14_distance_reading.png")
    return Figure(
        name,
        "Far from the data: the mean log-sum-exp of the logits (left) and the confidence (right) "
        "as the test inputs are scaled away from the training mean (one line per seed).",
    )


_CONFIG = {"lr": 1e-3, "scales": [1.0, 2.0, 4.0, 8.0, 16.0]}

EXPERIMENT = Experiment(
    id="E14",
    title="Is a linear softmax head a distance model?",
    claims=("m3",),
    hypothesis=(
        "Stated before the run. The distance reading predicts (1) that a linear head's "
        "log Σ e^z, a log-density up to a constant, falls as inputs move away from the data, "
        "and (2) that its logits order the classes as a fitted distance model (a tied-covariance "
        "Gaussian on the same features) does. The scores reading predicts (1) the opposite for a "
        "ReLU network, whose logits grow linearly along a ray, and nothing about (2)."
    ),
    setup=(
        "A one-hidden-layer ReLU encoder with a linear head (the ordinary case) or a prototype "
        "head (the control), cross-entropy, Adam; test inputs scaled by λ ∈ {1, 2, 4, 8, 16} "
        "around the training mean; the fitted model is linear discriminant analysis on the "
        "training features (class means, one shared covariance)."
    ),
    run=run,
    headline=("lse_rise_share_linear", "rank_agreement_linear", "confidence_far_linear"),
    meaning={
        "holds": "The linear head rises far from the data as scores do, yet orders classes as a "
        "distance model: the distance reading holds locally, not globally (m3 mixed).",
        "partly": "One prediction of the distance reading holds and the other fails; the "
        "criteria say which.",
        "fails": "The linear head's density falls far from the data but its class order "
        "disagrees with the fitted distance model.",
    },
    minutes={"smoke": 0.2, "quick": 0.8, "full": 1.0},
)

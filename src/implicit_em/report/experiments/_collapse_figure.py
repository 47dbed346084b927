"""E6's figure: per variant, the share of dead units, the log-determinant and the redundancy over training, and the linear probe's accuracy at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from implicit_em.report.experiments._encoders import (
    DEAD_VARIANCE,
    VARIANTS,
)
from implicit_em.report.experiments._neural import (
    mean_std,
)
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.registry import Figure

STYLES = {
    "lse": ("#cf222e", "-", "o"),
    "lse_var_decor": ("#1a7f37", "--", "s"),
    "lse_log_det": ("#0969da", "-", "D"),
    "layernorm": ("#8250df", ":", "^"),
    "layernorm_plain": ("#bf8700", "-.", "v"),
    "batchnorm": ("#1b7c83", "--", "P"),
    "weight_decay": ("#57606a", ":", "x"),
    "ce": ("#cf222e", "-", "o"),
    "ce_log_det": ("#0969da", "--", "D"),
    "ce_layernorm_plain": ("#bf8700", "-.", "v"),
    "ce_batchnorm": ("#1b7c83", ":", "P"),
}
"""Colour, line style and marker per variant: lines that coincide stay told apart."""

SHORT = {
    "lse": "LSE",
    "lse_var_decor": "+var+decor",
    "lse_log_det": "+log-det",
    "layernorm": "LN",
    "layernorm_plain": "LN no affine",
    "batchnorm": "BN no affine",
    "weight_decay": "WD",
    "ce": "CE",
    "ce_log_det": "CE+log-det",
    "ce_layernorm_plain": "CE, LN no affine",
    "ce_batchnorm": "CE, BN no affine",
}


def collapse_figure(
    runs: dict[str, list[dict[str, Any]]], config: dict, out: Path, data: str
) -> Figure:
    groups = [
        [v for v, spec in VARIANTS.items() if not spec.supervised],
        [v for v, spec in VARIANTS.items() if spec.supervised],
    ]
    fig, axes = new_figure(ncols=4, nrows=len(groups), width=4.2, height=3.5)
    for row, group in zip(axes, groups, strict=True):
        figure_row(row, runs, group, data)
    axes[0, 0].set_title("LSE objective (unsupervised encoder)", fontsize=9)
    axes[1, 0].set_title("prototype classifier (cross-entropy)", fontsize=9)
    name = save(fig, out, "e6_collapse.png")
    return Figure(
        name,
        f"Top row: the unsupervised encoders; bottom row: the supervised prototype classifiers. "
        f"Left: share of units whose variance over {config['monitor']} training images is below "
        f"{DEAD_VARIANCE}, during training (mean over seeds). Second: the volume the missing "
        "term measures, log det of the distances' covariance (ε = 1e-4 per unit; mean over "
        "seeds). Third: the tracer's distance scale (mean per-image std of d) at the loss site "
        "(symmetric log axis from 0). Right: linear-probe accuracy of the final features (mean "
        "± std). Line styles and markers tell apart curves that lie on one another.",
    )


def figure_row(
    row: Any, runs: dict[str, list[dict[str, Any]]], group: list[str], data: str
) -> None:
    ax_dead, ax_volume, ax_scale, ax_probe = row
    # Drawn widest first, so that a line lying on another still shows around it.
    for rank, v in enumerate(group):
        colour, style, marker = STYLES[v]
        kw = {
            "color": colour,
            "linestyle": style,
            "marker": marker,
            "markersize": 4,
            "linewidth": 3.2 - 0.35 * rank,
            "label": VARIANTS[v].label,
        }
        steps = runs[v][0]["curve"]["step"]
        dead = torch.tensor([r["curve"]["dead_fraction"] for r in runs[v]]).mean(0)
        ax_dead.plot(steps, dead.tolist(), **kw)
        volume = torch.tensor([r["curve"]["log_det"] for r in runs[v]]).mean(0)
        ax_volume.plot(steps, volume.tolist(), **kw)
        trace = runs[v][0]["trace"]
        every = max(1, len(trace["step"]) // 8)
        ax_scale.plot(trace["step"], trace["scale"], markevery=every, **kw)
    ax_dead.set_xlabel("training step")
    ax_dead.set_ylabel("share of dead units (monitor images)")
    ax_dead.set_ylim(-0.03, 1.03)
    ax_dead.legend(fontsize=6)
    ax_volume.set_xlabel("training step")
    ax_volume.set_ylabel("log det(Cov d + εI) (monitor images)")
    ax_scale.set_xlabel("training step")
    ax_scale.set_ylabel("tracer: distance scale (first seed)")
    ax_scale.set_yscale("symlog", linthresh=1e-3)
    ax_scale.set_ylim(bottom=0)
    means = [mean_std([r["final"]["probe"] for r in runs[v]]) for v in group]
    ax_probe.bar(
        range(len(group)),
        [m for m, _ in means],
        yerr=[s for _, s in means],
        color=[STYLES[v][0] for v in group],
    )
    ax_probe.set_xticks(range(len(group)))
    ax_probe.set_xticklabels([SHORT[v] for v in group], fontsize=7, rotation=30)
    ax_probe.set_ylabel(f"linear probe accuracy ({data} test)")
    ax_probe.set_ylim(0, 1)

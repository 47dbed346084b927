"""E19's figure: the distinct components in use over training, per arm (mean over seeds, with
each seed's final reading as a dot)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from implicit_em.report.rendering.figures import new_figure, save

__all__ = ["components_figure"]


def components_figure(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    labels: Mapping[str, str],
    components: int,
    out: Path,
) -> str:
    """Left: mean distinct components over training per arm; right: each seed's final count
    per arm, with the cut K/2 dashed. `runs[arm]` holds one `train_arm` result per seed."""
    fig, axes = new_figure(ncols=2, width=5.2, height=3.6)
    palette = ("#7f7f7f", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#1f77b4", "#2ca02c")
    colours = {arm: palette[i % len(palette)] for i, arm in enumerate(labels)}
    for i, (arm, label) in enumerate(labels.items()):
        curves = [r["curve"] for r in runs[arm]]
        steps = curves[0]["step"]
        mean = np.mean([c["distinct"] for c in curves], axis=0)
        axes[0, 0].plot(steps, mean, color=colours[arm], label=label)
        finals = [r["final"]["distinct"] for r in runs[arm]]
        axes[0, 1].scatter(finals, [i] * len(finals), color=colours[arm], s=14)
    axes[0, 0].axhline(components / 2, color="black", linestyle="--", linewidth=0.8)
    axes[0, 0].set_xlabel("step")
    axes[0, 0].set_ylabel(f"distinct components (of {components})")
    axes[0, 0].legend(fontsize=5, loc="upper right", framealpha=0.6)
    axes[0, 1].axvline(components / 2, color="black", linestyle="--", linewidth=0.8)
    axes[0, 1].set_yticks(range(len(labels)), list(labels.values()), fontsize=6)
    axes[0, 1].set_xlabel("distinct components at the end, per seed")
    axes[0, 1].set_xlim(0, components)
    return save(fig, out, "residual_components.png")

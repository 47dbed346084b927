"""E4's figure of prototypes: per data set and objective, where the prototypes trained from the
same random rows end on the clean data and with far outliers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from implicit_em.report.experiments._clusters import Clusters, Variant
from implicit_em.report.rendering.figures import new_figure, save

__all__ = ["prototypes_figure"]


def prototypes_figure(
    data: dict[str, Clusters],
    first: dict[str, dict[str, Any]],
    shown: list[Variant],
    out: Path,
) -> str:
    """One row per data set of `data` (its rows and true centres), one column per objective of
    `shown`: the prototypes of `first[data set][objective]`'s `clean` and `contaminated` runs.
    Saved as `prototypes.png` in `out`; returns its file name."""
    fig, axes = new_figure(ncols=len(shown), nrows=len(data), width=3.0, height=3.0)
    for row, (data_name, rows) in enumerate(data.items()):
        for col, v in enumerate(shown):
            ax = axes[row, col]
            ax.scatter(rows.x[:, 0], rows.x[:, 1], s=3, color="#bbbbbb")
            ax.scatter(rows.centres[:, 0], rows.centres[:, 1], marker="x", s=60, color="black")
            clean = np.array(first[data_name][v.name]["clean"])
            pulled = np.array(first[data_name][v.name]["contaminated"])
            ax.scatter(clean[:, 0], clean[:, 1], s=40, color="#1f77b4", label="clean")
            ax.scatter(
                pulled[:, 0],
                pulled[:, 1],
                s=70,
                facecolors="none",
                edgecolors="#d62728",
                linewidths=1.6,
                label="with outliers",
            )
            ax.set_title(f"{data_name}: {v.name}", fontsize=8)
            margin = 0.3 * rows.separation
            ax.set_xlim(float(rows.x[:, 0].min()) - margin, float(rows.x[:, 0].max()) + margin)
            ax.set_ylim(float(rows.x[:, 1].min()) - margin, float(rows.x[:, 1].max()) + margin)
            if row == 0 and col == 0:
                ax.legend(fontsize=7, loc="upper right")
    return save(fig, out, "prototypes.png")

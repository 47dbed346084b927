"""E4's map for C7 as the report shows it: one table per data set (every cell of kernel width and
outlier share, with 95% t intervals over the seeds) and one figure (per data set, which of
robustness and loss of competition holds in each cell, and which cells are excluded because a
model does not fit the inliers). The measurements are `_kernel_sweep`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from implicit_em.report.experiments import _kernel_sweep as ks
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.registry import Table

__all__ = ["map_figure", "map_tables"]

STATES = ("excluded", "neither", "robust only", "no competition only", "both")
COLOURS = ("#dddddd", "#f4a582", "#92c5de", "#fddbc7", "#2166ac")


def _share(flags: list[Any]) -> np.ndarray:
    """Over the seeds (the first axis of the stacked `flags`), the mean of the defined (not NaN)
    values: the share of the seeds where a flag holds, over the seeds where it can be read; NaN
    where none can."""
    v = np.asarray(flags, dtype=float)
    defined = ~np.isnan(v)
    count = defined.sum(axis=0)
    total = np.where(defined, v, 0.0).sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _interval(values: list[float]) -> str:
    """`mean [low, high]` of the defined values, a 95% t interval over those seeds (a gain is
    undefined on a seed whose start covers every cluster); `undefined` when none is."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return "undefined"
    mean = float(v.mean())
    if len(v) < 2 or float(v.std()) == 0.0:
        return f"{mean:.3f} [{mean:.3f}, {mean:.3f}]"
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def map_tables(
    per_data_set: dict[str, list[dict[str, Any]]], config: dict[str, Any]
) -> list[Table]:
    """One table per data set: for every cell, whether it counts, both models' inlier fit, outlier
    pull and gain (mean and 95% interval over the seeds, in Δ; the gain over the seeds where it is
    defined) and the share of the seeds where correntropy is more robust, shows no competition,
    and both (the last two over the seeds where the gain is defined)."""
    tables = []
    for name, units in per_data_set.items():
        valid = ks.valid_cells(units, config, "correntropy")
        flags = [ks.cell_flags(u, config, "correntropy") for u in units]
        rows = []
        for i, share in enumerate(config["sweep_outlier_shares"]):
            for j, width in enumerate(config["sweep_widths"]):
                rows.append(
                    (
                        f"{width:g}Δ",
                        f"{share:.0%}",
                        "yes" if valid[i, j] else "no (fit)",
                        *(_interval([u[m]["fit"][j] for u in units]) for m in ks.MODELS),
                        _interval([u["lse"]["pull"][i][j] for u in units]),
                        _interval([u["correntropy"]["pull"][i][j] for u in units]),
                        _interval([u["lse"]["gain"][i][j] for u in units]),
                        _interval([u["correntropy"]["gain"][i][j] for u in units]),
                        *(
                            f"{float(_share([f[flag][i, j] for f in flags])):.2f}"
                            for flag in ("robust", "no_competition", "both")
                        ),
                    )
                )
        tables.append(
            Table(
                f"{name}: correntropy against the mixture NLL per kernel width and outlier share "
                "(mean [95% t interval] over the seeds; fit and pull in Δ)",
                (
                    "width",
                    "outliers",
                    "counted",
                    "fit, mixture",
                    "fit, correntropy",
                    "pull, mixture",
                    "pull, correntropy",
                    "gain, mixture",
                    "gain, correntropy",
                    "seeds more robust",
                    "seeds without competition",
                    "seeds both",
                ),
                tuple(rows),
            )
        )
    return tables


def map_figure(
    per_data_set: dict[str, list[dict[str, Any]]], config: dict[str, Any], out: Path
) -> str:
    """Per data set, a map over (width, outlier share): excluded cells in grey, otherwise which of
    robustness and loss of competition holds in a majority of the seeds."""
    from matplotlib.colors import ListedColormap  # the `report` extra; imported when drawing

    fig, axes = new_figure(ncols=len(per_data_set), width=3.6, height=3.0)
    widths, shares = config["sweep_widths"], config["sweep_outlier_shares"]
    for ax, (name, units) in zip(axes[0], per_data_set.items(), strict=True):
        valid = ks.valid_cells(units, config, "correntropy")
        flags = [ks.cell_flags(u, config, "correntropy") for u in units]
        robust = np.mean([f["robust"] for f in flags], axis=0) > 0.5
        alone = _share([f["no_competition"] for f in flags]) > 0.5  # seeds with a defined gain
        state = np.where(valid, 1 + robust.astype(int) + 2 * alone.astype(int), 0)
        ax.imshow(state, cmap=ListedColormap(COLOURS), vmin=0, vmax=len(STATES) - 1, origin="lower")
        for (i, j), s in np.ndenumerate(state):
            colour = "white" if s == len(STATES) - 1 else "black"
            label = STATES[s].replace(" ", "\n", 1)
            ax.text(j, i, label, ha="center", va="center", fontsize=5, color=colour)
        ax.set_xticks(range(len(widths)), [f"{w:g}Δ" for w in widths], fontsize=7)
        ax.set_yticks(range(len(shares)), [f"{s:.0%}" for s in shares], fontsize=7)
        ax.set_xlabel("kernel width", fontsize=8)
        ax.set_ylabel("outlier share", fontsize=8)
        ax.set_title(name, fontsize=8)
    return save(fig, out, "kernel_map.png")

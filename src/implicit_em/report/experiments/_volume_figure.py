"""E5's figure: the Gaussian log-likelihood, the largest component's share and log|det W| over training, per configuration, on the first seed of each data set."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from implicit_em.report.rendering.figures import new_figure, save


def volume_figure(curves: dict, config: dict, out: Path) -> str:
    names = sorted({name for name, _ in curves})
    fig, axes = new_figure(ncols=3, nrows=len(names), width=3.8, height=3.0)
    colours = {"no volume": "#d62728", "log-det volume": "#1f77b4", "surrogate": "#2ca02c"}
    for row, data_name in enumerate(names):
        for name in colours:
            c = curves.get((data_name, name))
            if c is None or not c["log_det"]:
                continue
            steps = np.arange(len(c["log_det"])) * config["record_every"]
            axes[row, 0].plot(steps, c["log_det"], color=colours[name], label=name)
            axes[row, 1].plot(
                steps, np.maximum(c["gaussian_log_likelihood"], -20), color=colours[name]
            )
            axes[row, 2].plot(steps, c["max_share"], color=colours[name])
        axes[row, 0].set_title(f"{data_name}: mean log|det W|", fontsize=9)
        axes[row, 1].set_title(f"{data_name}: Gaussian mean log-lik (clipped at −20)", fontsize=9)
        axes[row, 2].set_title(f"{data_name}: largest mass share", fontsize=9)
        for ax in axes[row]:
            ax.set_xlabel("step")
    axes[0, 0].legend(fontsize=7)
    return save(fig, out, "volume.png")

"""E20's figure: per event type, each run's event onset and the first step of each detector."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.report.experiments._event_readings import DETECTORS
from implicit_em.report.rendering.figures import new_figure, save

MARKERS = {
    "tracer": ("o", "#1f77b4"),
    "loss_spike": ("s", "#ff7f0e"),
    "grad_spike": ("^", "#2ca02c"),
}


def event_figure(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], titles: Mapping[str, str], out: Path
) -> str:
    """One panel per family (`runs`: its runs' readings): one row per run, the onset as a black
    bar (runs without an event drawn grey, without one), each detector's first step as a marker;
    a detector that never fired is not drawn."""
    fig, axes = new_figure(ncols=len(runs), width=4.2, height=3.4)
    axes = axes.reshape(-1)
    for ax, (family, family_runs) in zip(axes, runs.items(), strict=True):
        for row, run in enumerate(family_runs):
            colour = "black" if run["event"] else "#bbbbbb"
            ax.axhline(row, color="#eeeeee", lw=0.5, zorder=0)
            if run["event"]:
                ax.plot([run["onset"]], [row], "|", color=colour, ms=12, mew=2)
            for detector, (marker, c) in MARKERS.items():
                if run[detector] is not None:
                    ax.plot([run[detector]], [row], marker, color=c, ms=4, alpha=0.8)
        ax.set_title(titles[family], fontsize=9)
        ax.set_xlabel("training step")
        ax.set_ylabel("run (event runs first)")
    for detector, (marker, c) in MARKERS.items():
        axes[0].plot([], [], marker, color=c, label=DETECTORS[detector])
    axes[0].plot([], [], "|", color="black", label="event onset")
    axes[0].legend(fontsize=7, loc="lower right")
    return save(fig, out, "collapse_events.png")

"""Figures of wind-tunnel results (matplotlib, Agg backend): error per position, training curves,
and the two-timescale drift of a traced run.

Both functions take result dictionaries as written by `implicit_em.windtunnel.train.run`
and a label for each, draw one line per result on a log scale, and save a PNG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["plot_drift", "plot_positions", "plot_training"]

_FLOOR = 1e-6  # log-scale floor for exact zeros


def _supervised(curve: list[float | None]) -> tuple[list[int], list[float]]:
    pairs = [(t, max(v, _FLOOR)) for t, v in enumerate(curve) if v is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]


def plot_positions(results: list[dict[str, Any]], labels: list[str], path: str | Path) -> Path:
    """Entropy error and KL (bits) against sequence position, plus the exact entropy."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for result, label in zip(results, labels, strict=True):
        curves = result["per_position"]
        for ax, key in zip(axes[:2], ("entropy_mae", "kl"), strict=True):
            ax.plot(*_supervised(curves[key]), marker="o", ms=3, label=label)
    axes[2].plot(*_supervised(results[0]["per_position"]["entropy"]), marker="o", ms=3, color="k")
    titles = (
        "|H(model) - H(posterior)| (bits)",
        "KL(posterior || model) (bits)",
        "posterior entropy (bits)",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xlabel("position")
        ax.set_title(title)
    for ax in axes[:2]:
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_training(results: list[dict[str, Any]], labels: list[str], path: str | Path) -> Path:
    """Training loss and held-out entropy error (bits) against step."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for result, label in zip(results, labels, strict=True):
        h = result["history"]
        axes[0].plot(h["step"], h["loss"], label=label)
        axes[1].plot(
            h["eval_step"],
            [max(v, _FLOOR) for v in h["eval_bits_mae"]],
            marker="o",
            ms=3,
            label=label,
        )
    axes[0].set_title("training loss")
    axes[1].set_title("held-out entropy MAE (bits)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_drift(records: list[dict[str, Any]], path: str | Path) -> Path:
    """Two timescales: attention drift and value drift of each traced layer against step."""
    from implicit_em.windtunnel.tracing import drift_series

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (site, series) in enumerate(drift_series(records).items()):
        for key, style in (("attention_drift", "-"), ("value_drift", "--")):
            steps, values = series[key]
            values = [max(v, _FLOOR) for v in values]
            ax.plot(steps, values, style, color=f"C{i}", label=f"{site} {key}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_title("attention drift (TV of alpha) vs value drift (relative change of v)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)

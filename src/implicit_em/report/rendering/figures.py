"""Figures of the report: matplotlib without a display, saved as PNG into an experiment's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["new_figure", "save"]


def new_figure(
    ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6
) -> tuple[Any, Any]:
    """A figure with `nrows x ncols` axes of `width x height` inches each (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def save(fig: Any, out: Path, name: str) -> str:
    """Write `fig` to `out/name` (PNG, 110 dpi), close it, and return `name`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name

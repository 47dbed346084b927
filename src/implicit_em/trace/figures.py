"""The standard figures of a traced run, from a tracer's history or its JSON Lines file.

Each function draws on a fresh matplotlib `Figure` (Agg canvas, no pyplot state) and returns it;
[standard_figures][implicit_em.trace.figures.standard_figures] writes them all as PNG files, and
[health_timeline][implicit_em.trace.figures.health_timeline] draws the timelines of the health
page (`implicit-em trace report`). Requires matplotlib (the `plot` extra); `implicit_em.plot`
gives the standard figures their short name.

Examples
--------
```python
import implicit_em as iem

paths = iem.plot.standard_figures("runs/trace.jsonl", "figures/")
```
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from implicit_em.trace.sinks import History
from implicit_em.trace.summary import quantile

__all__ = [
    "churn",
    "effective_k",
    "health_timeline",
    "responsibility_mass",
    "standard_figures",
    "two_timescales",
]


def _history(source: History | str | Path) -> History:
    return source if isinstance(source, History) else History.from_jsonl(source)


def _figure(rows: int = 1, width: float = 7.0, height: float = 3.2) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("implicit_em.plot needs matplotlib: pip install matplotlib") from err
    fig = Figure(figsize=(width, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def responsibility_mass(source: History | str | Path, site: str) -> Any:
    r"""Stacked responsibility mass $\bar r_j$ per component over steps at one site.

    Parameters
    ----------
    source : History or str or Path
        A [History][implicit_em.trace.History], or the path of a JSON Lines file written by the
        tracer's `"jsonl"` sink.
    site : str
        A classification or mixture site's name.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.

    Raises
    ------
    ValueError
        If the site has no recorded mass.
    ImportError
        If matplotlib is missing.
    """
    history = _history(source)
    steps, masses = history.series(site, "mass")
    if not steps:
        raise ValueError(f"site {site!r} has no recorded mass; sites: {history.sites()}")
    fig = _figure()
    ax = fig.add_subplot()
    ax.stackplot(
        steps, list(zip(*masses, strict=True)), labels=[str(j) for j in range(len(masses[0]))]
    )
    ax.set(
        xlabel="step",
        ylabel="responsibility mass",
        title=f"{site}: mass per component",
        ylim=(0, 1),
    )
    if len(masses[0]) <= 12:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", title="component")
    return fig


def effective_k(source: History | str | Path) -> Any:
    r"""Effective number of components $\exp H(\bar r)$ and mean entropy per site, over steps.

    Parameters
    ----------
    source : History or str or Path
        A [History][implicit_em.trace.History], or the path of a JSON Lines file written by the
        tracer's `"jsonl"` sink.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels: effective K and mean entropy, one line per responsibility site.
    """
    history = _history(source)
    fig = _figure(rows=2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for site in history.sites("classification") + history.sites("mixture"):
        top.plot(*history.series(site, "effective_k"), label=site)
        bottom.plot(*history.series(site, "entropy"), label=site)
    top.set(ylabel="effective K", title="specialization")
    bottom.set(xlabel="step", ylabel="mean entropy (nats)")
    top.legend(fontsize="small")
    return fig


def churn(source: History | str | Path) -> Any:
    """Share of probe assignments (argmax) that changed between measurements, per site.

    Parameters
    ----------
    source : History or str or Path
        A [History][implicit_em.trace.History], or the path of a JSON Lines file written by the
        tracer's `"jsonl"` sink.

    Returns
    -------
    matplotlib.figure.Figure
        One line per responsibility site.
    """
    history = _history(source)
    fig = _figure()
    ax = fig.add_subplot()
    for site in history.sites("classification") + history.sites("mixture"):
        ax.plot(*history.series(site, "churn"), label=site)
    ax.set(xlabel="step", ylabel="churn", title="assignment churn on the probe batch")
    ax.legend(fontsize="small")
    return fig


def two_timescales(source: History | str | Path) -> Any:
    """Attention-pattern drift versus value drift on the probe batch, per attention site (C12).

    Parameters
    ----------
    source : History or str or Path
        A [History][implicit_em.trace.History], or the path of a JSON Lines file written by the
        tracer's `"jsonl"` sink.

    Returns
    -------
    matplotlib.figure.Figure
        One panel, log scale: per attention site, the attention drift (solid) and the value
        drift (dashed) between measurements.
    """
    history = _history(source)
    fig = _figure()
    ax = fig.add_subplot()
    for i, site in enumerate(history.sites("attention")):
        color = f"C{i % 10}"
        ax.plot(*history.series(site, "attention_drift"), color=color, label=f"{site} attention")
        ax.plot(*history.series(site, "value_drift"), color=color, ls="--", label=f"{site} values")
    ax.set(
        xlabel="step",
        ylabel="drift between measurements",
        yscale="log",
        title="two timescales: attention (solid) vs values (dashed)",
    )
    ax.legend(fontsize="x-small")
    return fig


def health_timeline(history: History, kind: str, metrics: Sequence[str], max_lines: int = 8) -> Any:
    """Timelines of health metrics over steps at the sites of one type, with its alarms.

    One panel per metric. With at most `max_lines` sites, one line per site; with more, the
    median over sites and a band from their minimum to their maximum, so the figure stays
    readable however deep the model. Steps at which a site of this type raised an alarm are
    red vertical lines.

    Parameters
    ----------
    history : History
        The records of a traced run.
    kind : str
        The site type (`"classification"`, `"mixture"`, `"attention"`, ...).
    metrics : sequence of str
        The metrics to draw (each a scalar field of the type's records).
    max_lines : int, default=8
        The most sites drawn one line each.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.
    """
    sites = history.sites(kind)
    alarm_steps = sorted({a["step"] for a in history.alarms() if a["site"] in set(sites)})
    columns = 2 if len(metrics) > 1 else 1
    rows = -(-len(metrics) // columns)
    fig = _figure(rows=rows, width=10.0, height=2.6)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, metric in zip(axes, metrics, strict=False):
        series = {site: history.series(site, metric) for site in sites}
        if len(sites) <= max_lines:
            for site, (steps, values) in series.items():
                ax.plot(steps, values, marker=".", lw=1, label=site)
        else:
            by_step: dict[int, list[float]] = {}
            for steps, values in series.values():
                for step, value in zip(steps, values, strict=True):
                    by_step.setdefault(step, []).append(value)
            steps = sorted(by_step)
            ordered = [sorted(by_step[s]) for s in steps]
            median = [quantile(v, 0.5) for v in ordered]
            ax.fill_between(
                steps,
                [v[0] for v in ordered],
                [v[-1] for v in ordered],
                alpha=0.25,
                label=f"min–max of {len(sites)} sites",
            )
            ax.plot(steps, median, lw=1.5, label="median")
        for step in alarm_steps:
            ax.axvline(step, color="#cf222e", ls="--", lw=0.8)
        ax.set(xlabel="step", ylabel=metric)
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    if alarm_steps:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="#cf222e", ls="--", lw=0.8))
        labels.append("alarm")
    if handles:
        fig.legend(
            handles, labels, loc="outside upper center", ncols=min(4, len(labels)), fontsize="small"
        )
    return fig


def standard_figures(source: History | str | Path, outdir: str | Path) -> list[Path]:
    """Write every figure that the history has data for as PNG files.

    Parameters
    ----------
    source : History or str or Path
        A [History][implicit_em.trace.History], or the path of a JSON Lines file written by the
        tracer's `"jsonl"` sink.
    outdir : str or Path
        The folder (created if missing).

    Returns
    -------
    list of Path
        The files written: `mass_<site>.png` per responsibility site with mass,
        `effective_k.png`, `churn.png` and `two_timescales.png` where the history has their data.
    """
    history = _history(source)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    responsibility_sites = history.sites("classification") + history.sites("mixture")
    for site in responsibility_sites:
        if history.series(site, "mass")[0]:
            figures[f"mass_{site}"] = responsibility_mass(history, site)
    if responsibility_sites:
        figures["effective_k"] = effective_k(history)
        if any(history.series(s, "churn")[0] for s in responsibility_sites):
            figures["churn"] = churn(history)
    if any(history.series(s, "attention_drift")[0] for s in history.sites("attention")):
        figures["two_timescales"] = two_timescales(history)
    paths = []
    for name, fig in figures.items():
        path = out / f"{name.replace('/', '_')}.png"
        fig.savefig(path, dpi=100)
        paths.append(path)
    return paths

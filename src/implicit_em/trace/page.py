"""The health page of a traced run: one self-contained HTML file from its JSON Lines records.

`implicit-em trace report RUN.jsonl --out DIR` writes `DIR/index.html`, built with the shared
page pieces (`implicit_em.pages`):

* a summary table, one row per site type (sites, measured steps, alarms, the latest median of
  its health metric);
* per site type, timelines of its health metrics over steps (`trace.figures.health_timeline`)
  with the steps of its alarms marked;
* the alarms with their messages: one row per site and alarm (how often, first and last step),
  then every alarm in order (the first 500);
* the worst sites of each type at their latest measurement.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from implicit_em.pages import embedded_figure, escape, page, table
from implicit_em.trace.sinks import History, Record
from implicit_em.trace.summary import BOOKKEEPING, health_metric, quantile

__all__ = ["TIMELINES", "RunFile", "RunFileError", "health_page", "read_run"]

TIMELINES = {
    "classification": ("entropy", "effective_k", "dominance", "dead", "scale", "residual"),
    "mixture": ("entropy", "effective_k", "dominance", "dead", "scale", "residual"),
    "attention": (
        "entropy",
        "routing_value_ratio",
        "value_residual",
        "alpha_residual",
        "attention_drift",
        "value_drift",
    ),
}
"""The metrics drawn per site type (those with data); a type not listed gets its scalar
metrics, at most `_MAX_PANELS`."""

_MAX_PANELS = 8
_MAX_ALARM_ROWS = 500


class RunFileError(ValueError):
    """A line of a run's JSON Lines file is not a tracer record (truncated or corrupt)."""


@dataclass
class RunFile:
    """The records read from a run's file, and where reading stopped (None: the whole file)."""

    path: Path
    history: History
    error: str | None = None


def read_run(path: str | Path, partial: bool = False) -> RunFile:
    """Read a tracer's JSON Lines file, strictly.

    Parameters
    ----------
    path : str or Path
        The file (`Tracer(sinks=["jsonl:PATH"])`).
    partial : bool, default=False
        At a bad line, keep the records read before it (`RunFile.error` says where reading
        stopped) instead of raising.

    Returns
    -------
    RunFile
        Its records.

    Raises
    ------
    RunFileError
        At the first line that is not a JSON object with a `kind` (unless `partial`); the
        message names the file and the line.
    OSError
        If the file cannot be read.
    """
    path = Path(path)
    records: list[Record] = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            problem = _problem(line)
            if problem is not None:
                message = f"{path}:{number}: {problem}"
                if not partial:
                    raise RunFileError(message)
                return RunFile(path, History(records), message)
            records.append(json.loads(line))
    return RunFile(path, History(records))


def _problem(line: str) -> str | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        return f"not a JSON record ({err.msg} at column {err.colno}; truncated or corrupt)"
    if not isinstance(record, dict) or record.get("kind") not in ("site", "alarm"):
        return "not a tracer record (a JSON object with kind 'site' or 'alarm')"
    if "step" not in record or "site" not in record:
        return "not a tracer record (no 'step' or 'site')"
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _metrics(history: History, kind: str) -> list[str]:
    """The metrics drawn for `kind`: its `TIMELINES` entry, else its scalar fields."""
    present: set[str] = set()
    for r in history:
        if r["kind"] == "site" and r["type"] == kind:
            present |= {k for k, v in r.items() if k not in BOOKKEEPING and _scalar(v)}
    listed = TIMELINES.get(kind)
    if listed is None:
        return sorted(present)[:_MAX_PANELS]
    return [m for m in listed if m in present]


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def health_page(run: RunFile, top_k: int = 5) -> str:
    """The health page of a run (see the module docstring), as one HTML document.

    Parameters
    ----------
    run : RunFile
        The records (`read_run`).
    top_k : int, default=5
        The worst sites listed per site type.

    Returns
    -------
    str
        The page; its figures are embedded PNG images (needs matplotlib).
    """
    from implicit_em.trace.figures import health_timeline

    history = run.history
    alarms = history.alarms()
    kinds = sorted({r["type"] for r in history if r["kind"] == "site"})
    latest: dict[str, Record] = {}
    for r in history:
        if r["kind"] == "site":
            latest[r["site"]] = r
    steps = sorted({r["step"] for r in history})
    parts = [f"<h1>Tracer health: {escape(run.path.name)}</h1>"]
    span = f"steps {steps[0]}–{steps[-1]}" if steps else "no steps"
    parts.append(
        f"<p class='meta'>{escape(run.path)} · {len(history)} records · "
        f"{len(steps)} measured steps ({span}) · {len(alarms)} alarms</p>"
    )
    if run.error is not None:
        parts.append(
            f"<p class='note' id='partial'>Partial: reading stopped at {escape(run.error)}. "
            f"The page shows the {len(history)} records before it.</p>"
        )
    summary_rows, worst_parts, type_parts = [], [], []
    for kind in kinds:
        sites = [r for r in latest.values() if r["type"] == kind]
        kind_steps = sorted(
            {r["step"] for r in history if r["kind"] == "site" and r["type"] == kind}
        )
        names = {r["site"] for r in sites}
        n_alarms = sum(a["site"] in names for a in alarms)
        health = health_metric(kind, sites)
        values = sorted(r[health] for r in sites if health and _scalar(r.get(health)))
        median = quantile(values, 0.5) if values else None
        summary_rows.append(
            (
                kind,
                len(sites),
                len(kind_steps),
                kind_steps[-1],
                n_alarms,
                "-" if health is None else health,
                "-" if median is None else median,
            )
        )
        if health is not None:
            scored = sorted((r[health], r["site"]) for r in sites if _scalar(r.get(health)))
            rows = [
                (site, latest[site]["step"], value, sum(a["site"] == site for a in alarms))
                for value, site in scored[:top_k]
            ]
            worst_parts.append(
                table(
                    ("site", "latest step", health, "alarms"),
                    rows,
                    title=f"{kind}: lowest {health}",
                )
            )
        metrics = _metrics(history, kind)
        section = [f"<section id='type-{escape(kind)}'><h2>{escape(kind)} sites</h2>"]
        if metrics:
            caption = (
                f"{kind}: {', '.join(metrics)} over steps at {len(sites)} sites; "
                "red dashed lines: steps with an alarm"
            )
            section.append(embedded_figure(_png(health_timeline(history, kind, metrics)), caption))
        else:
            section.append("<p>No scalar metric was measured at these sites.</p>")
        section.append("</section>")
        type_parts.append("".join(section))
    parts.append("<section id='summary'><h2>Summary</h2>")
    parts.append(
        table(
            (
                "site type",
                "sites",
                "measured steps",
                "latest step",
                "alarms",
                "health metric",
                "latest median",
            ),
            summary_rows,
        )
        if summary_rows
        else "<p>No site records.</p>"
    )
    parts.append("</section>")
    parts += type_parts
    parts.append("<section id='alarms'><h2>Alarms</h2>")
    if alarms:
        groups: dict[tuple[str, str], list[Record]] = {}
        for a in alarms:
            groups.setdefault((a["site"], a["alarm"]), []).append(a)
        grouped = [
            (site, alarm, len(g), g[0]["step"], g[-1]["step"], g[0].get("message", ""))
            for (site, alarm), g in sorted(groups.items(), key=lambda item: item[1][0]["step"])
        ]
        parts.append(
            table(
                ("site", "alarm", "times", "first step", "last step", "first message"),
                grouped,
                title="per site and alarm",
            )
        )
        rows = [
            (
                a["step"],
                a["site"],
                a["alarm"],
                a.get("value"),
                a.get("threshold"),
                a.get("message", ""),
            )
            for a in alarms[:_MAX_ALARM_ROWS]
        ]
        more = len(alarms) - len(rows)
        parts.append(
            f"<details><summary>Every alarm ({len(alarms)})</summary>"
            + table(("step", "site", "alarm", "value", "threshold", "message"), rows)
            + (f"<p class='note'>… and {more} more in the file.</p>" if more > 0 else "")
            + "</details>"
        )
    else:
        parts.append("<p>No alarm was raised.</p>")
    parts.append("</section>")
    parts.append("<section id='worst'><h2>Worst sites</h2>")
    parts += worst_parts or ["<p>No site has a health metric.</p>"]
    parts.append("</section>")
    return page(f"Tracer health: {run.path.name}", "\n".join(parts))

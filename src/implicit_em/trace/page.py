"""The health page of a traced run: one self-contained HTML file from its JSON Lines records.

`implicit-em trace report RUN.jsonl --out DIR` writes `DIR/index.html`, built with the shared
page pieces (`implicit_em.pages`):

* a summary table, one row per site type (sites, measured steps, alarms, the latest median of
  its health metric);
* per site type, one timeline per health metric over steps (`trace.figures.health_timeline`,
  the steps of its alarms marked), with the metric's definition and healthy range beside it
  (`METRICS`); a metric flat at its healthy value at every site and step is one line instead;
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
from implicit_em.trace.records import Record
from implicit_em.trace.sinks import History
from implicit_em.trace.summary import BOOKKEEPING, health_metric, quantile

__all__ = [
    "METRICS",
    "TIMELINES",
    "Metric",
    "RunFile",
    "RunFileError",
    "health_page",
    "read_run",
    "site_label",
]

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

_ROUND_OFF = 1e-5
"""An identity residual within float32 round-off: the identity holds."""


@dataclass(frozen=True)
class Metric:
    """What a health metric is, the range in which a site is healthy, and the value it keeps
    when nothing is wrong (None: no single value; its panel is always drawn)."""

    definition: str
    healthy: str
    flat_at: float | None = None


METRICS = {
    "entropy": Metric(
        "mean entropy of each row's responsibilities (attention: of each query's weights), in "
        "nats: 0 for hard assignments, log K for uniform ones",
        "no single range; a fall to near 0 is collapse (attention: an alarm below 0.1 × a "
        "head's first value)",
    ),
    "effective_k": Metric(
        "exp of the entropy of the batch's mean responsibilities: how many components the "
        "batch uses",
        "≥ 1.5 (alarm below); collapse drives it to 1",
    ),
    "dominance": Metric(
        "the largest component's share of the batch's responsibility mass",
        "≤ 0.9 (alarm above); 1/K when every component is used equally",
    ),
    "dead": Metric(
        "components whose share of the mass is below 0.01 / K: they (almost) never win",
        "0 (any dead component raises an alarm)",
        flat_at=0.0,
    ),
    "scale": Metric(
        "mean standard deviation of the logits over components: the distance scale",
        "≥ 0.1 × the site's first value (alarm below); a shrinking scale flattens every "
        "responsibility",
    ),
    "residual": Metric(
        "largest gap between the responsibilities read from the gradient and the softmax of "
        "the logits (the identity ∂L/∂z = r − t)",
        f"≤ {_ROUND_OFF:g}, round-off: the identity holds",
        flat_at=0.0,
    ),
    "routing_value_ratio": Metric(
        "size of the routing update α ⊙ (a − ā) over that of the value update Σ_i α_ij g_i",
        "no single range: which of the two updates dominates",
    ),
    "value_residual": Metric(
        "the value-update identity ∂L/∂v = αᵀg against autograd, relative",
        f"≤ {_ROUND_OFF:g}, round-off",
        flat_at=0.0,
    ),
    "alpha_residual": Metric(
        "how well the recomputed attention weights rebuild the output, relative",
        f"≤ {_ROUND_OFF:g} without attention dropout",
        flat_at=0.0,
    ),
    "attention_drift": Metric(
        "mean total variation of the probe's attention weights since the last measurement",
        "no single range: the E-step's timescale; it falls as routing settles",
    ),
    "value_drift": Metric(
        "relative change of the probe's values since the last measurement",
        "no single range: the M-step's timescale (≫ attention_drift late in training: C12)",
    ),
}
"""The definition and healthy range shown beside each metric's timeline (thresholds: the
tracer's default alarm rules)."""

_SUFFIXES = {
    "ce": "cross-entropy",
    "nll": "negative log-likelihood",
    "mixture": "mixture objective",
    "router": "mixture-of-experts router",
    "attn": "attention",
}

_SITE_NAMES = (
    "A site is named by the module path of the layer whose output the loss reads, as "
    "<code>model.named_modules()</code> names it (<code>2</code> is the third layer of an "
    "<code>nn.Sequential</code>, <code>transformer.h.3.attn</code> the attention of block 3), "
    "then what is read there: <code>ce</code> cross-entropy, <code>nll</code> negative "
    "log-likelihood, <code>mixture</code> a mixture objective, <code>router</code> a "
    "mixture-of-experts router."
)
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


def site_label(site: str) -> str:
    """A site's name with what it names: `2.ce` is `2.ce (module 2, cross-entropy)`."""
    path, _, suffix = site.rpartition(".")
    what = _SUFFIXES.get(suffix)
    if what is None:
        return site
    return f"{site} ({f'module {path}, ' if path else ''}{what})"


def _flat_healthy(history: History, kind: str, metric: str) -> bool:
    """Whether `metric` keeps its healthy value at every site of `kind` and every step."""
    flat_at = METRICS[metric].flat_at if metric in METRICS else None
    if flat_at is None:
        return False
    values = [
        r[metric]
        for r in history
        if r["kind"] == "site" and r["type"] == kind and _scalar(r.get(metric))
    ]
    return bool(values) and all(abs(v - flat_at) <= _ROUND_OFF for v in values)


def _timelines(history: History, kind: str, n_sites: int) -> list[str]:
    """One timeline per metric of `kind` with its definition and healthy range beside it;
    the metrics flat at their healthy value as one line."""
    from implicit_em.trace.figures import health_timeline

    metrics = _metrics(history, kind)
    flat = [m for m in metrics if _flat_healthy(history, kind, m)]
    parts = []
    for metric in (m for m in metrics if m not in flat):
        figure = _png(health_timeline(history, kind, [metric]))
        caption = f"{kind}: {metric} over steps at {n_sites} sites; red dashed lines: alarms"
        parts.append(
            f"<div class='metric' id='{escape(kind)}-{escape(metric)}'>"
            f"{embedded_figure(figure, caption)}{_guide(metric)}</div>"
        )
    if flat:
        parts.append(
            "<p class='healthy'><b>At their healthy value at every site and step:</b> "
            + "; ".join(
                f"<code>{escape(m)}</code> within {_ROUND_OFF:g} of {METRICS[m].flat_at:g} "
                f"({escape(METRICS[m].definition)})"
                for m in flat
            )
            + ".</p>"
        )
    return parts


def _guide(metric: str) -> str:
    """The definition and healthy range of `metric`, as shown beside its timeline."""
    known = METRICS.get(metric)
    if known is None:
        return f"<div class='guide'><b>{escape(metric)}</b></div>"
    return (
        f"<div class='guide'><b>{escape(metric)}</b>: {escape(known.definition)}."
        f"<br><b>Healthy:</b> {escape(known.healthy)}.</div>"
    )


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
        f"{len(steps)} measured steps ({escape(span)}) · {len(alarms)} alarms</p>"
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
                (
                    site_label(site),
                    latest[site]["step"],
                    value,
                    sum(a["site"] == site for a in alarms),
                )
                for value, site in scored[:top_k]
            ]
            worst_parts.append(
                table(
                    ("site", "latest step", health, "alarms"),
                    rows,
                    title=f"{kind}: lowest {health}",
                )
            )
        section = [f"<section id='type-{escape(kind)}'><h2>{escape(kind)} sites</h2>"]
        section += _timelines(history, kind, len(sites)) or [
            "<p>No scalar metric was measured at these sites.</p>"
        ]
        section.append("</section>")
        type_parts.append("".join(section))
    parts.append(f"<p class='note'>{_SITE_NAMES}</p>")
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
            (site_label(site), alarm, len(g), g[0]["step"], g[-1]["step"], g[0].get("message", ""))
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

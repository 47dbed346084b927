"""The report's three files: `index.html` (self-contained), `results.json`, `summary.md`.

`results.json` holds everything the page shows (and the figures' paths beside it), so the page
can be rebuilt from it with `render_html` alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.pages import embedded_figure, format_number, page
from implicit_em.pages import escape as _esc
from implicit_em.pages import table as _table
from implicit_em.report.claims import CLAIMS

__all__ = ["format_number", "render_html", "render_markdown", "report_document"]

_COLOURS = {"holds": "#1a7f37", "fails": "#cf222e", "partly": "#9a6700", "not run": "#57606a"}

_INTRO = (
    "For any objective with log-sum-exp structure over distances, L = log Σ_j exp(−d_j), the "
    "gradient is ∂L/∂d_j = −r_j, where r_j = softmax(−d)_j is the posterior responsibility of "
    "component j. A paper argues that gradient descent on such objectives therefore performs "
    "expectation-maximization implicitly, in mixtures, attention and classification; a referee "
    "objected. Each experiment below tests named claims (C) and objections or proposed tests "
    "(R, T, m), states its rule before it runs, and gets its verdict from its measurements by "
    "that rule: holds, fails, partly (with the reason) or not run."
)


def report_document(
    results: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON document of a report: its metadata and one entry per experiment."""
    return {"meta": dict(meta), "claims": CLAIMS, "experiments": list(results)}


def _headline(entry: Mapping[str, Any]) -> str:
    return "; ".join(f"{k} = {format_number(v)}" for k, v in entry["headline"].items())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(document: Mapping[str, Any]) -> str:
    """The summary table in Markdown: claims, experiment, verdict, key numbers."""
    meta = document["meta"]
    lines = [
        f"Claims report ({meta['size']}), {meta['date']}, {meta['machine']}",
        "",
        "| claims | experiment | verdict | key numbers |",
        "|---|---|---|---|",
    ]
    for e in document["experiments"]:
        lines.append(
            f"| {', '.join(e['claims'])} | {e['id']}: {_cell(e['title'])} | **{e['verdict']}** | "
            f"{_cell(_headline(e))} |"
        )
    return "\n".join(lines) + "\n"


def _verdict(verdict: str) -> str:
    colour = _COLOURS.get(verdict, "#57606a")
    return f'<span class="verdict" style="background:{colour}">{_esc(verdict)}</span>'


def _claim_refs(ids: Sequence[str]) -> str:
    return ", ".join(
        f'<a href="#claim-{_esc(c)}" title="{_esc(CLAIMS.get(c, ""))}">{_esc(c)}</a>' for c in ids
    )


def _figure(root: Path, figure: Mapping[str, str]) -> str:
    return embedded_figure((root / figure["path"]).read_bytes(), figure["caption"])


def _section(root: Path, e: Mapping[str, Any]) -> str:
    parts = [
        f'<section id="{_esc(e["id"])}"><h2>{_esc(e["id"])}: {_esc(e["title"])} {_verdict(e["verdict"])}</h2>',
        f"<p class='claims'>Tests {_claim_refs(e['claims'])}.</p>",
        f"<p><b>Hypothesis.</b> {_esc(e['hypothesis'])}</p>",
        f"<p><b>Setup.</b> {_esc(e['setup'])}</p>",
        f"<p><b>Rule, stated before the run.</b> {_esc(e['rule'])}</p>",
    ]
    if e["criteria"]:
        rows = [
            (
                c["number"],
                f"{c['op']} {format_number(c['threshold'])}",
                "not measured" if c["value"] is None else c["value"],
                {True: "met", False: "not met", None: "not measured"}[c["met"]],
                c["means"],
            )
            for c in e["criteria"]
        ]
        parts.append(_table(("number", "needs", "measured", "", "what it says"), rows))
    parts.append(f"<p><b>Verdict: {_esc(e['verdict'])}.</b> {_esc(e['reason'])}</p>")
    if e["meaning"]:
        parts.append(f"<p><b>What it means.</b> {_esc(e['meaning'])}</p>")
    if e["error"]:
        parts.append(f"<pre class='error'>{_esc(e['error'])}</pre>")
    for note in e["notes"]:
        parts.append(f"<p class='note'>{_esc(note)}</p>")
    for table in e["tables"]:
        parts.append(_table(table["columns"], table["rows"], table["title"]))
    for figure in e["figures"]:
        parts.append(_figure(root, figure))
    numbers = [(k, v) for k, v in e["numbers"].items()]
    if numbers:
        parts.append(
            "<details><summary>All measured numbers</summary>"
            + _table(("number", "value"), numbers)
            + "</details>"
        )
    config = json.dumps(e["config"], sort_keys=True)
    cached = ", from the cache" if e["cached"] else ""
    parts.append(
        f"<p class='meta'>Size {_esc(e['size'])}, {e['seconds']:.1f} s{cached}; "
        f"configuration <code>{_esc(config)}</code></p></section>"
    )
    return "\n".join(parts)


def render_html(document: Mapping[str, Any], root: Path) -> str:
    """The self-contained page; `root` is the folder the figures' paths are relative to."""
    meta = document["meta"]
    experiments = document["experiments"]
    summary_rows = "".join(
        f"<tr><td>{_claim_refs(e['claims'])}</td><td><a href='#{_esc(e['id'])}'>{_esc(e['id'])}</a>: "
        f"{_esc(e['title'])}</td><td>{_verdict(e['verdict'])}</td><td>{_esc(_headline(e))}</td></tr>"
        for e in experiments
    )
    tested: dict[str, list[Mapping[str, Any]]] = {}
    for e in experiments:
        for c in e["claims"]:
            tested.setdefault(c, []).append(e)
    claim_rows = "".join(
        f"<tr id='claim-{_esc(c)}'><td>{_esc(c)}</td><td>{_esc(text)}</td><td>"
        + (
            ", ".join(
                f"<a href='#{_esc(e['id'])}'>{_esc(e['id'])}</a> {_verdict(e['verdict'])}"
                for e in tested[c]
            )
            if c in tested
            else "not in this report"
        )
        + "</td></tr>"
        for c, text in document["claims"].items()
    )
    counts = {v: sum(e["verdict"] == v for e in experiments) for v in _COLOURS}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    sections = "\n".join(_section(root, e) for e in experiments)
    body = f"""<h1>implicit-em claims report</h1>
<p class="meta">Size {_esc(meta["size"])} · {_esc(meta["date"])} · implicit-em {_esc(meta["version"])} ·
{_esc(meta["machine"])} · {meta["seconds"]:.0f} s of experiments</p>
<p>{_esc(_INTRO)}</p>
<h2>Summary</h2><p>{_esc(tally)}.</p>
<table><thead><tr><th>claims</th><th>experiment</th><th>verdict</th><th>key numbers</th></tr></thead>
<tbody>{summary_rows}</tbody></table>
<h2>Claims and where they are checked</h2>
<table><thead><tr><th>id</th><th>statement</th><th>checked by</th></tr></thead><tbody>{claim_rows}</tbody></table>
{sections}"""
    return page("implicit-em claims report", body)

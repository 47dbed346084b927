"""The report's page, `index.html`: self-contained (figures embedded), rebuilt from
`results.json` alone. Items are coloured by what their verdict says of the paper, experiments
by their verdict; each experiment has its protocol, criteria with their controls, forest plots,
tables, figures and configuration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.pages import embedded_figure, format_number, page
from implicit_em.pages import escape as _esc
from implicit_em.pages import table as _table
from implicit_em.report.claims import CLAIMS, DIRECTIONS, direction
from implicit_em.report.forest import forest_svg
from implicit_em.report.item_verdicts import controls_pass
from implicit_em.report.render import (
    comparison_line,
    criterion_evidence,
    excluded_experiments,
    exploratory_mark,
    full_mark,
    headline,
)
from implicit_em.report.runner import duration

__all__ = ["render_html", "sample_count"]

_GREEN, _RED, _BLUE, _GREY, _PURPLE = "#1a7f37", "#cf222e", "#0969da", "#57606a", "#8250df"
_COLOURS = {
    # An experiment's verdict says which of its criteria were met, not for whom: one neutral
    # colour for all three; red only for a broken gate.
    "holds": _BLUE,
    "partly": _BLUE,
    "fails": _BLUE,
    "inconclusive": _PURPLE,
    "invalid": _RED,
    "not run": _GREY,
}
_DIRECTION_COLOURS = dict(zip(DIRECTIONS, (_GREEN, _RED, _GREY), strict=True))
"""Items are coloured by what their verdict says of the paper."""

_INTRO = (
    "For any objective with log-sum-exp structure over distances, L = log Σ_j exp(−d_j), the "
    "gradient is ∂L/∂d_j = −r_j, where r_j = softmax(−d)_j is the posterior responsibility of "
    "component j. A paper argues that gradient descent on such objectives therefore performs "
    "expectation-maximization implicitly, in mixtures, attention and classification; a referee "
    "objected. Each experiment below tests named claims (C) and objections or proposed tests "
    "(R, T, m) under a protocol registered before its confirmatory run (its criteria, "
    "thresholds, seeds and budgets, with a hash; every amendment is listed with its date and "
    "reason, and a verdict resting on an amendment made after its data were seen is "
    "exploratory). Sanity gates (true by algebra or implementation) make a verdict invalid when "
    "they fail, and answer the items they verify (verified (algebra)). Criteria (empirical, "
    "could go either way) are judged on 95% intervals over independent seeds: met, not met or "
    "undecided; each earns its vote with two known-answer controls run through the same "
    "measurement code, a planted effect that must read met and its absence that must read not "
    "met. One criterion per item is primary and gives the item's verdict (supported, refuted or "
    "inconclusive for a claim; stands, answered or inconclusive for an objection); the others "
    "are shown beside it. Items are coloured by what their verdict says of the paper. "
    "An interval is over samples: one per seed, or several per seed when each seed runs on "
    "more than one data set or variant (the criteria tables say which)."
)


def _verdict(verdict: str, colour: str | None = None) -> str:
    colour = colour or _COLOURS.get(verdict, _GREY)
    return f'<span class="verdict" style="background:{colour}">{_esc(verdict)}</span>'


def _claim_refs(ids: Sequence[str]) -> str:
    return ", ".join(
        f'<a href="#claim-{_esc(c)}" title="{_esc(CLAIMS.get(c, ""))}">{_esc(c)}</a>' for c in ids
    )


def _figure(root: Path, figure: Mapping[str, str]) -> str:
    return embedded_figure((root / figure["path"]).read_bytes(), figure["caption"])


def _controls(c: Mapping[str, Any]) -> str:
    controls = c.get("controls")
    if not controls:
        return "none (casts no vote)"
    verdict = "as planted" if controls_pass(controls) else "NOT as planted (casts no vote)"
    return (
        f"positive {controls.get('positive')}, negative {controls.get('negative')}: {verdict}. "
        f"{c.get('control_line', '')}"
    )


def sample_count(count: Any, seeds: Any) -> str:
    """What a criterion's interval is over: its number of samples, and how many per seed when
    each seed gives several (one per data set or variant)."""
    n_seeds = len(seeds) if isinstance(seeds, list) else 0
    if not isinstance(count, int) or not n_seeds or count == n_seeds:
        return f"{count} (one per seed)" if n_seeds and count == n_seeds else str(count)
    seeds_ = f"{n_seeds} seed{'s' if n_seeds > 1 else ''}"
    if count % n_seeds == 0:
        return f"{count} ({seeds_} × {count // n_seeds} per seed)"
    return f"{count} (over {seeds_})"


def _criteria_rows(
    criteria: Sequence[Mapping[str, Any]], seeds: Any = None
) -> tuple[tuple[str, ...], list]:
    columns = (
        "number",
        "bears on",
        "needs",
        "estimate [95% interval]",
        "samples",
        "status",
        "known-answer controls",
        "what it says",
        "the paper's words",
        "how it could have failed",
    )
    rows = []
    for c in sorted(criteria, key=lambda c: not c.get("primary")):
        status = c["status"] or "not measured"
        if status == "undecided":
            more = c.get("seeds_to_decide")
            status += f" (about {more} seeds would decide)" if more else " (more seeds needed)"
        measured = (
            "not measured"
            if c["estimate"] is None
            else f"{format_number(c['estimate'])} [{format_number(c['low'])}, "
            f"{format_number(c['high'])}] ({c['method']})"
        )
        role = "primary for" if c.get("primary") else "secondary on"
        rows.append(
            (
                c["number"],
                f"{role} {c['claim']} ({c['direction']})",
                f"{c['op']} {format_number(c['threshold'])}",
                measured,
                sample_count(c["seeds"], seeds),
                status,
                _controls(c),
                c["means"],
                c.get("quote", ""),
                c["how_it_could_fail"],
            )
        )
    return columns, rows


def _protocol_line(e: Mapping[str, Any]) -> str:
    """The protocol the verdict was judged under: hash, registration, amendments."""
    protocol = e.get("protocol") or {}
    registered = protocol.get("registered")
    when = f"registered {registered}" if registered else "NOT registered"
    lines = [f"Protocol {protocol.get('hash', '?')}, {when}."]
    for a in protocol.get("amendments", []):
        after = (
            f"after data were seen (seeds {', '.join(map(str, a.get('seeds_seen', [])))}): "
            f"{a.get('seen', '')}"
            if a["after_data"]
            else "before any confirmatory data"
        )
        lines.append(f"Amendment of {a['date']}: {a['reason']} ({after}).")
    if e.get("exploratory"):
        lines.append(
            "This verdict is EXPLORATORY: an amendment was made after these seeds' data were "
            "seen; it stands only once rerun on fresh confirmation seeds."
        )
    return " ".join(lines)


def _section(root: Path, e: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    parts = [
        f'<section id="{_esc(e["id"])}"><h2>{_esc(e["id"])}: {_esc(e["title"])} {_verdict(e["verdict"])}</h2>',
        f"<p class='claims'>Tests {_claim_refs(e['claims'])}.</p>",
        f"<p><b>Hypothesis.</b> {_esc(e['hypothesis'])}</p>",
        f"<p><b>Setup.</b> {_esc(e['setup'])}</p>",
        f"<p><b>Rule, stated before the run.</b> {_esc(e['rule'])}</p>",
        f"<p class='meta'>{_esc(_protocol_line(e))}</p>",
    ]
    if e["gates"]:
        rows = [(g["name"], "passed" if g["passed"] else "FAILED", g["detail"]) for g in e["gates"]]
        parts.append(_table(("sanity gate", "", "detail"), rows, "Sanity gates"))
    if e["criteria"]:
        parts.append(
            _table(
                *_criteria_rows(e["criteria"], e.get("seeds")),
                "Criteria (95% intervals over the samples)",
            )
        )
    mark = full_mark(e, meta)
    mark = f" ({mark})" if mark else ""
    exploratory = exploratory_mark(e)
    parts.append(
        f"<p><b>Verdict: {_esc(e['verdict'])}{exploratory}{_esc(mark)}.</b> {_esc(e['reason'])}</p>"
    )
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
    cached = " (read from the cache)" if e["cached"] else ""
    seeds = e.get("seeds")
    seeds = f"; {len(seeds)} seeds" if isinstance(seeds, list) else ""
    commit = f"; commit {_esc(e['commit'])}" if e.get("commit") else ""
    machine = e.get("machine")
    machine = f"; measured on {_esc(machine)}" if machine and machine != meta["machine"] else ""
    parts.append(
        f"<p class='meta'>Size {_esc(e['size'])}{seeds}; measured time {e['seconds']:.1f} s"
        f"{cached}{_units_line(e.get('units'))}{commit}{machine}; cache key {_esc(e['key'])}</p>"
    )
    parts.append(_configuration(e["config"]))
    parts.append("</section>")
    return "\n".join(parts)


def _units_line(units: Mapping[str, Any] | None) -> str:
    """The experiment's units as its provenance line shows them ('' when none was timed)."""
    if not units:
        return ""
    resumed = f", {units['resumed']} read back from an earlier sitting" if units["resumed"] else ""
    return (
        f"; {units['count']} units of work, {units['seconds']:.1f} s together, the longest "
        f"{_esc(units['longest'])} {units['longest_seconds']:.1f} s{resumed}"
        f"{_where_line(units.get('where') or {})}"
    )


def _where_line(where: Mapping[str, Mapping[str, float]]) -> str:
    """Where the units ran: per host (device), how many and their seconds ('' when not
    recorded)."""
    if not where:
        return ""
    places = "; ".join(
        f"{_esc(place)}: {int(used['units'])} unit{'' if used['units'] == 1 else 's'}, "
        f"{used['seconds']:.1f} s"
        for place, used in sorted(where.items())
    )
    return f"; ran on {places}"


def _configuration(config: Mapping[str, Any]) -> str:
    """The experiment's configuration, folded: one row per setting, its key in words."""
    rows = [(key.replace("_", " "), _setting(value)) for key, value in sorted(config.items())]
    return (
        "<details><summary>Configuration</summary>"
        + _table(("setting", "value"), rows)
        + "</details>"
    )


def _setting(value: Any) -> Any:
    """A configuration value as a cell: numbers as numbers, lists and mappings in short."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k.replace('_', ' ')} {format_number(v)}" for k, v in value.items())
    if isinstance(value, list | tuple) and not all(isinstance(v, int | float) for v in value):
        return ", ".join(str(v) for v in value)
    return value


_CLAIM_COLUMNS = (
    "id",
    "statement",
    "verdict",
    "experiments",
    "criteria: 95% intervals against thresholds",
)
"""The columns of the claims table, one cell function each in `_claim_cells`."""


def _claim_cells(c: Mapping[str, Any], document: Mapping[str, Any]) -> list[str]:
    """The cells (HTML) of one theory item's row of the claims table, in `_CLAIM_COLUMNS`
    order."""
    evidence = [*map(criterion_evidence, c["evidence"]), *excluded_experiments(c)]
    colour = _DIRECTION_COLOURS[direction(c["id"], c["verdict"])]
    return [
        _esc(c["id"]),
        _esc(document["claims"].get(c["id"], "")),
        f"{_verdict(c['verdict'], colour)}{_esc(exploratory_mark(c))}<br>"
        f"<span class='meta'>{_esc(direction(c['id'], c['verdict']))}</span> "
        f"{_esc(full_mark(c, document['meta']))}",
        ", ".join(f"<a href='#{_esc(i)}'>{_esc(i)}</a>" for i in c["experiments"]),
        forest_svg(c["evidence"])
        + "<details><summary>numbers</summary>"
        + "<br>".join(_esc(line) for line in evidence)
        + "</details>",
    ]


def _claims_table(document: Mapping[str, Any]) -> str:
    """The verdict of each claim and objection: one row per theory item (`_claim_cells`)."""
    head = "".join(f"<th>{_esc(c)}</th>" for c in _CLAIM_COLUMNS)
    rows = "".join(
        f"<tr id='claim-{_esc(c['id'])}'>"
        + "".join(f"<td>{cell}</td>" for cell in _claim_cells(c, document))
        + "</tr>"
        for c in document["claim_verdicts"]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _contents(experiments: Sequence[Mapping[str, Any]]) -> str:
    """The table of contents: the page's parts, then one entry per experiment."""
    entries = [
        ("how-to-read", "How to read this report"),
        ("claims", "Verdict per claim and objection"),
        ("experiments", "Experiments"),
    ]
    links = "".join(f"<li><a href='#{i}'>{_esc(title)}</a></li>" for i, title in entries)
    sections = "".join(
        f"<li><a href='#{_esc(e['id'])}'>{_esc(e['id'])}: {_esc(e['title'])}</a> "
        f"{_verdict(e['verdict'])}</li>"
        for e in experiments
    )
    return (
        f"<nav id='contents'><h2>Contents</h2><ul>{links}</ul>"
        f"<details open><summary>{len(experiments)} experiments</summary><ol>{sections}</ol>"
        "</details></nav>"
    )


def render_html(document: Mapping[str, Any], root: Path) -> str:
    """The self-contained page; `root` is the folder the figures' paths are relative to.

    In order: the title and provenance, the contents, how to read the page (before any
    table), the verdict per claim, the experiments' summary, one section per experiment."""
    meta = document["meta"]
    experiments = document["experiments"]
    summary_rows = "".join(
        f"<tr><td>{_claim_refs(e['claims'])}</td><td><a href='#{_esc(e['id'])}'>{_esc(e['id'])}</a>: "
        f"{_esc(e['title'])}</td><td>{_verdict(e['verdict'])} {_esc(full_mark(e, meta))}</td>"
        f"<td>{_esc(duration(e['seconds']))}</td><td>{_esc(headline(e))}</td></tr>"
        for e in experiments
    )
    by_direction = [direction(c["id"], c["verdict"]) for c in document["claim_verdicts"]]
    direction_tally = ", ".join(
        f"<span style='color:{_DIRECTION_COLOURS[d]}'><b>{by_direction.count(d)}</b> {_esc(d)}</span>"
        for d in DIRECTIONS
    )
    counts = {v: sum(e["verdict"] == v for e in experiments) for v in _COLOURS}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    sections = "\n".join(_section(root, e, meta) for e in experiments)
    partial = " (partial)" if (meta.get("publication") or {}).get("partial") else ""
    body = f"""<h1>implicit-em claims report{partial}</h1>
<p class="meta">Size {_esc(meta["size"])} · {_esc(meta["date"])} · implicit-em {_esc(meta["version"])} ·
{_esc(meta["machine"])} · {meta["seconds"]:.0f} s of experiments</p>
<p class="meta">{_esc(comparison_line(meta))}</p>
{_contents(experiments)}
<h2 id="how-to-read">How to read this report</h2>
<p>{_esc(_INTRO)}</p>
<h2 id="claims">Verdict per claim and objection</h2>
<p>{direction_tally}. Each item's verdict is its primary criterion's; the plot shows every
criterion on the item (primary first, thicker): its 95% interval over seeds (bar), estimate (dot)
and threshold (black tick), each row on its own scale, coloured by its vote (green for the item,
red against it, purple undecided, hollow grey when its known-answer controls did not come out as
planted).</p>
{_claims_table(document)}
<h2 id="experiments">Experiments</h2><p>{_esc(tally)}.</p>
<table><thead><tr><th>claims</th><th>experiment</th><th>verdict</th><th>time</th>
<th>key numbers</th></tr></thead>
<tbody>{summary_rows}</tbody></table>
{sections}"""
    return page("implicit-em claims report", body)

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
from implicit_em.report.judging.controls import NegativeControl
from implicit_em.report.judging.item_verdicts import controls_pass
from implicit_em.report.judging.readings import measured_text
from implicit_em.report.rendering.answers import answer_rows, html_table
from implicit_em.report.rendering.forest import forest_svg
from implicit_em.report.rendering.legend import legend, legend_html
from implicit_em.report.rendering.render import (
    alternative_lines,
    comparison_line,
    criterion_evidence,
    excluded_experiments,
    exploratory_line,
    exploratory_mark,
    form_line,
    full_mark,
    headline,
    link_lines,
    part_lines,
)
from implicit_em.report.rendering.units import units_line
from implicit_em.report.rules.claims import CLAIMS, DIRECTIONS, direction
from implicit_em.report.running.runner import duration

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

_HOW_TO_READ = (
    "A paper argues that gradient descent on log-sum-exp objectives over distances performs EM "
    "implicitly (∂L/∂d_j = −r_j, r = softmax(−d) the responsibilities); a referee objected. The "
    "table above answers each claim (C), objection (R, m) and proposed test (T): for the paper, "
    "against it, or open (and why), with the number that decides it (its 95% interval over "
    "seeds against its threshold) and the realistic rival that number was read against.",
    "Each item is split into the parts of its quoted sentence; its registered rule, set by the "
    "sentence's logical form, combines the parts' readings (a compound claim needs every part).",
    "Sanity gates hold by algebra or implementation (a failed one makes its experiment invalid); "
    "criteria could go either way, and vote only when their known-answer controls came out as "
    "planted and they were read against a realistic rival.",
    "An item that flips under a registered alternative reading is fragile; † marks a verdict "
    "that rests on a rule changed after its data were seen (exploratory). Items are coloured by "
    "what their verdict says of the paper.",
)
"""The page's short "how to read"; the legend (`legend.legend`) states every rule once."""


def _how_to_read(document: Mapping[str, Any]) -> str:
    """The short list, then a link to the legend, folded below it, and the guide's name."""
    bullets = "".join(f"<li>{_esc(b)}</li>" for b in _HOW_TO_READ)
    bullets += (
        "<li>Every rule, stated once: <a href='#legend'>the legend</a> (below); with examples, "
        "the report's guide, <code>docs/report.md</code>.</li>"
    )
    return (
        f"<ul>{bullets}</ul><details id='legend'><summary>Legend</summary>"
        f"{legend_html(legend(document['claim_verdicts'], blocks=False))}</details>"
    )


def _verdict(verdict: str, colour: str | None = None) -> str:
    colour = colour or _COLOURS.get(verdict, _GREY)
    return f'<span class="verdict" style="background:{colour}">{_esc(verdict)}</span>'


def _claim_refs(ids: Sequence[str]) -> str:
    return ", ".join(
        f'<a href="#claim-{_esc(c)}" title="{_esc(CLAIMS.get(c, ""))}">{_esc(c)}</a>' for c in ids
    )


def _figure(root: Path, figure: Mapping[str, str]) -> str:
    """The figure embedded; `ValueError` when its path leads out of `root` (a document names
    its own figures only, so no other file is ever read into the page)."""
    path = (root / figure["path"]).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ValueError(
            f"figure {figure['path']!r} lies outside {root}: a report embeds its own figures only"
        )
    return embedded_figure(path.read_bytes(), figure["caption"])


def _controls(c: Mapping[str, Any]) -> str:
    controls = c.get("controls")
    if not controls:
        return "none (casts no vote)"
    verdict = "as planted" if controls_pass(controls) else "NOT as planted (casts no vote)"
    negative = NegativeControl.from_data(c.get("negative_control"))
    kind = (
        "Negative control not classified (casts no vote)."
        if negative is None
        else f"Negative control {negative.line}"
        + ("." if negative.realistic else " (kept as a sanity gate; casts no vote).")
    )
    return (
        f"positive {controls.get('positive')}, negative {controls.get('negative')}: {verdict}. "
        f"{c.get('control_line', '')} {kind}"
    )


def _marks(c: Mapping[str, Any]) -> str:
    """What else decides whether a criterion votes: by construction, its rival's gates."""
    lines = []
    if c.get("by_construction"):
        lines.append(f"By construction (casts no vote): {c['by_construction']}.")
    if c.get("baseline"):
        gates = "; ".join(
            f"{g['number']} {g['op']} {format_number(g['threshold'])}"
            for g in c["baseline"]["gates"]
        )
        lines.append(f"Rival's own-task gate: {c['baseline']['says']} ({gates}).")
    return " ".join(lines)


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
        "estimate [95% interval] (method)",
        "samples",
        "status",
        "known-answer controls",
        "what it says",
        "the paper's words",
        "how it could have failed",
        "item marks",
    )
    rows = []
    for c in criteria:
        status = c["status"] or "not measured"
        if status == "degenerate":
            status += ": a gate, not a measurement (casts no vote)"
        if status == "undecided":
            more = c.get("seeds_to_decide")
            status += f" (about {more} seeds would decide)" if more else " (more seeds needed)"
        measured = measured_text(c)
        rows.append(
            (
                c["number"],
                f"{c['claim']} ({c['direction']})",
                f"{c['op']} {format_number(c['threshold'])}",
                measured,
                sample_count(c["seeds"], seeds),
                status,
                _controls(c),
                c["means"],
                c.get("quote", ""),
                c["how_it_could_fail"],
                _marks(c),
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
        why = (
            e.get("exploratory_reason") or "an amendment was made after these seeds' data were seen"
        )
        lines.append(
            f"This verdict is EXPLORATORY: {why}; it stands only once rerun on fresh "
            "confirmation seeds."
        )
    return " ".join(lines)


_GATE_WORDS = {True: "passed", False: "FAILED", None: "not measured"}


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
        rows = [(g["name"], _GATE_WORDS[g["passed"]], g["detail"]) for g in e["gates"]]
        parts.append(_table(("sanity gate", "", "detail"), rows, "Sanity gates"))
    if e["criteria"]:
        header_and_rows = _criteria_rows(e["criteria"], e.get("seeds"))
        parts.append(_table(*header_and_rows, "Criteria (95% intervals over the samples)"))
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
        f"{cached}{units_line(e.get('units'))}{commit}{machine}; cache key {_esc(e['key'])}</p>"
    )
    parts.append(_configuration(e["config"]))
    parts.append("</section>")
    return "\n".join(parts)


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
    "rule and parts",
    "experiments",
    "criteria: 95% intervals against thresholds",
)
"""The columns of the claims table, one cell function each in `_claim_cells`."""


def _claim_cells(c: Mapping[str, Any], document: Mapping[str, Any]) -> list[str]:
    """The cells (HTML) of one theory item's row of the claims table, in `_CLAIM_COLUMNS`
    order."""
    evidence = [*map(criterion_evidence, c["evidence"]), *excluded_experiments(c)]
    colour = _DIRECTION_COLOURS[direction(c["id"], c["verdict"])]
    qualifier = (
        f"<span class='meta'>({_esc(c['qualifier'])})</span><br>" if c.get("qualifier") else ""
    )
    return [
        _esc(c["id"]),
        _esc(document["claims"].get(c["id"], "")),
        f"{_verdict(c['verdict'], colour)}{_esc(exploratory_mark(c))}<br>{qualifier}"
        f"<span class='meta'>{_esc(direction(c['id'], c['verdict']))}</span> "
        f"{_esc(full_mark(c, document['meta']))}",
        _rule_cell(c),
        ", ".join(f"<a href='#{_esc(i)}'>{_esc(i)}</a>" for i in c["experiments"]),
        forest_svg(c["evidence"])
        + "<details><summary>numbers</summary>"
        + "<br>".join(_esc(line) for line in evidence)
        + "</details>",
    ]


def _rule_cell(c: Mapping[str, Any]) -> str:
    """An item's rule, each part's reading (those that decided the verdict starred), its
    verdict under each alternative and its links."""
    lines = filter(None, [form_line(c), *part_lines(c), exploratory_line(c)])
    parts = "<br>".join(_esc(line) for line in lines)
    more = [*alternative_lines(c), *link_lines(c)]
    folded = (
        "<details><summary>alternatives and links</summary>"
        + "<br>".join(_esc(line) for line in more)
        + "</details>"
        if more
        else ""
    )
    rule = f"<span class='meta'>rule: {_esc(c.get('rule', ''))}; reading {_esc(c.get('reading', ''))}</span>"
    return f"{parts}{folded}<details><summary>rule</summary>{rule}</details>"


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

    In order: the title and provenance, the answers table (the one the findings page and the
    README open with), the contents, how to read the page, the verdict per claim, the
    experiments' summary, one section per experiment."""
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
{_esc(meta["machine"])} · {meta["seconds"]:.0f} s of experiments{_esc(_published_from(meta))}</p>
<p class="meta">{_esc(comparison_line(meta))}</p>
<h2 id="answers">The paper answered, item by item</h2>
{html_table(answer_rows(document["claim_verdicts"]))}
{_contents(experiments)}
<h2 id="how-to-read">How to read this report</h2>
{_how_to_read(document)}
<h2 id="claims">Verdict per claim and objection</h2>
<p>{direction_tally}. Each item's verdict is its registered rule over the parts of its
quoted sentence (starred: the parts that decided it); the plot shows every criterion on the item:
its 95% interval over seeds (bar), estimate (dot) and threshold (black tick), each row on its own
scale, coloured by its vote (green for the item, red against it, purple undecided, hollow grey
when it casts no vote: by construction, no realistic negative control, controls not as
planted).</p>
{_claims_table(document)}
<h2 id="experiments">Experiments</h2><p>{_esc(tally)}.</p>
<table><thead><tr><th>claims</th><th>experiment</th><th>verdict</th><th>time</th>
<th>key numbers</th></tr></thead>
<tbody>{summary_rows}</tbody></table>
{sections}"""
    return page("implicit-em claims report", body)


def _published_from(meta: Mapping[str, Any]) -> str:
    """Where a report comes from: the commit it was published (or run) from and whether the
    tree was clean, and when it was judged again."""
    publication = meta.get("publication") or {}
    where = publication if publication.get("commit") else meta
    tree = "clean tree" if where.get("clean") else "uncommitted changes"
    verb = "published from" if where is publication else "run from"
    source = f" · {verb} commit {where['commit']} ({tree})" if where.get("commit") else ""
    rejudged = "; ".join(r["date"] for r in publication.get("rejudged", []))
    return source + (f" · judged again {rejudged}" if rejudged else "")

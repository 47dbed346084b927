"""The report's document (`results.json`) and its markdown summary (`summary.md`); the page,
`index.html`, is `implicit_em.report.rendering.page`.

`results.json` holds everything the page shows (and the figures' paths beside it), so the page
can be rebuilt from it with `page.render_html` alone. Below full size, `summary.md` has a "full size"
column beside each verdict, read from the published full-size report (`full_cell`, the same
function that fills the README's column), and a line naming that run's date and machine
(`comparison_line`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.pages import format_number
from implicit_em.report.items.marks import attach_marks, marks_hash
from implicit_em.report.items.registry import load_registry
from implicit_em.report.judging.item_verdicts import claim_verdicts, verdict_label
from implicit_em.report.judging.replication import seed_text
from implicit_em.report.rules.claims import CLAIMS, direction
from implicit_em.report.running.runner import duration

__all__ = [
    "NOT_PUBLISHED",
    "NO_FULL_RUN",
    "alternative_lines",
    "compared_with",
    "comparison_line",
    "criterion_evidence",
    "excluded_experiments",
    "exploratory_line",
    "exploratory_mark",
    "form_line",
    "format_number",
    "full_cell",
    "full_entries",
    "full_mark",
    "headline",
    "link_lines",
    "part_lines",
    "render_markdown",
    "report_document",
    "time_cell",
]

NO_FULL_RUN = "no full run published"
NOT_PUBLISHED = "not published"
EXPLORATORY = " (exploratory)"
"""The mark after an exploratory verdict."""


def report_document(
    results: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    full: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON document of a report: metadata, one verdict per theory item, one entry per
    experiment (each criterion with its item marks); below full size each verdict carries the
    published full-size one (`full_verdict`, None when there is none to compare with). The
    metadata's `item_rules` are the hashes of the item registry and of the criteria's marks
    the items were read under."""
    experiments = attach_marks(results)
    items = claim_verdicts(list(CLAIMS), experiments)
    meta = dict(meta)
    meta["item_rules"] = {
        "registry": load_registry().hash,
        "marks": marks_hash([e["id"] for e in experiments]),
    }
    if meta["size"] != "full" or meta.get("replication"):
        meta["compared_with"] = compared_with(full)
        published = full_entries(full)
        for entry in [*experiments, *items]:
            counterpart = published.get(entry["id"], {})
            entry["full_verdict"] = (
                verdict_label(counterpart) if counterpart.get("verdict") else None
            )
            entry["full_exploratory"] = bool(counterpart.get("exploratory"))
    return {"meta": meta, "claims": CLAIMS, "claim_verdicts": items, "experiments": experiments}


def full_entries(full: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """The published full run's experiments and items by id (each with its `verdict` and
    `exploratory` flag); none without a published run.

    The items are read again from the published criteria under the current item rules (an item
    verdict is never taken on trust from a publication, as an experiment's verdict is never
    cached); a document whose experiments keep no criteria shows its stored item verdicts."""
    experiments = list((full or {}).get("experiments", []))
    items = (full or {}).get("claim_verdicts", [])
    if any(e.get("criteria") for e in experiments):
        items = claim_verdicts(list(CLAIMS), attach_marks(experiments))
    return {entry["id"]: entry for entry in [*experiments, *items]}


def compared_with(full: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a smaller report says of the published full run it is compared with: its date,
    version, size, machine and publication (None when there is none)."""
    if full is None:
        return None
    keys = ("date", "version", "size", "machine", "publication")
    return {k: full["meta"].get(k) for k in keys}


def full_cell(verdict: str | None, published: bool, exploratory: bool = False) -> str:
    """A cell of the "full size" column: the published verdict (marked exploratory when it is),
    "not in the full run" for an item the published run has no verdict for, or "not
    published"."""
    if not published:
        return NOT_PUBLISHED
    if verdict is None:
        return "not in the full run"
    return f"**{verdict}**" + (EXPLORATORY if exploratory else "")


def criterion_evidence(c: Mapping[str, Any]) -> str:
    """One criterion's reading as an item row shows it: number, interval, status, direction (the
    item's reading of it), and its vote, or why it casts none (`items.votes`)."""
    standing = c.get("standing", "counted")
    vote = f"vote {c['vote']}" if standing == "counted" else f"{c['vote']}: {standing}"
    return (
        f"{c['experiment']} {c['number']} = {format_number(c['estimate'])} "
        f"[{format_number(c['low'])}, {format_number(c['high'])}] (needs {c['op']} "
        f"{format_number(c['threshold'])}; {c['status']}, {c['direction']}; {vote})"
    )


def form_line(c: Mapping[str, Any]) -> str:
    """The logical form of an item's sentence and the words that decide it ('' when the
    registry states none)."""
    if not c.get("form"):
        return ""
    return f"form: {c['form']}" + (f" ({c['form_why']})" if c.get("form_why") else "")


def part_lines(c: Mapping[str, Any]) -> list[str]:
    """Each part of an item as its row shows it: the quoted words, the reading, and whether it
    decided the verdict; a part beside the item is marked as a finding that casts no vote."""
    return [
        f"{'*' if p['id'] in c.get('decided_by', []) else ''}{p['id']} "
        f'("{p["quote"]}"): {p["reading"]}'
        + (f": {p['reason']}" if p["reason"] else "")
        + (f" [BESIDE the item, no vote: {p['beside']}]" if p.get("beside") else "")
        for p in c.get("parts", [])
    ]


def _alternative_verdict(a: Mapping[str, Any]) -> str:
    if not a["available"]:
        return "not available in this report"
    if a["flips"]:
        return f"{a['verdict']} (FLIPS the verdict)"
    if a.get("differs"):
        return f"{a['verdict']} (differs, but a reading {a.get('reading')} cannot flip it)"
    return str(a["verdict"])


def alternative_lines(c: Mapping[str, Any]) -> list[str]:
    """The item's verdict under each registered alternative, flips marked, and the kind of
    reading of one that is not sound (it is shown but cannot flip)."""
    return [
        f"{a['id']}: {_alternative_verdict(a)}"
        + (
            f" [{a['reading']}]"
            if a.get("reading", "sound") != "sound" and not a.get("differs")
            else ""
        )
        + f" ({a['says']})"
        for a in c.get("alternatives", [])
    ]


def link_lines(c: Mapping[str, Any]) -> list[str]:
    """The item's links to other items, contradicting or not."""
    return [
        f"{'CONTRADICTS' if link['contradicts'] else 'consistent with'} {link['with']}: "
        f"{link['reason']}"
        for link in c.get("links", [])
    ]


def excluded_experiments(c: Mapping[str, Any]) -> list[str]:
    """The experiments bearing on a claim row that cast no vote, as the row shows them."""
    return [
        f"{x['experiment']} {x['verdict']} (its criteria are not read)"
        for x in c.get("excluded", [])
    ]


def full_mark(entry: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """How this verdict compares with the published full run ('' at full size or when equal)."""
    if (meta["size"] == "full" and not meta.get("replication")) or meta.get(
        "compared_with"
    ) is None:
        return ""  # a full run has nothing to compare with; without one the header says so
    full = entry.get("full_verdict")
    run = "full run" if meta["compared_with"].get("size") in (None, "full") else "published run"
    if full is None:
        return f"not in the {run}"
    return "" if full == verdict_label(entry) else f"{run}: {full}"


def comparison_line(meta: Mapping[str, Any]) -> str:
    """The line under a report's title: a full-size run and its publication, or what a smaller
    report or a replication is compared with (the published run's date and machine); a
    replication says so first, with its seeds and whether they are fresh."""
    replication = meta.get("replication")
    if meta["size"] == "full" and not replication:
        return "This is a full-size run." + _publication(meta.get("publication"))
    first = replication_line(replication) + " " if replication else ""
    compared = meta.get("compared_with")
    if compared is None:
        return (
            f"{first}Size {meta['size']}: {NO_FULL_RUN}; verdicts here are not checked against one."
        )
    run = "full" if compared.get("size") in (None, "full") else compared["size"]
    return (
        f"{first}Size {meta['size']}, compared with the published {run} run of {compared['date']} "
        f"on {compared.get('machine') or 'an unrecorded machine'} (implicit-em "
        f"{compared['version']})." + _publication(compared.get("publication"))
    )


def replication_line(replication: Mapping[str, Any]) -> str:
    """What a replication says of itself: its seeds, and whether they are fresh."""
    line = f"REPLICATION on {replication['label']}"
    if replication["fresh"]:
        return line + " (fresh seeds: none used in development or in a published run)."
    used = seed_text(replication["not_fresh"])
    return (
        f"{line}: NOT fresh, seeds {used} were used in development, in a quick or confirmatory "
        "run, or by an amendment."
    )


def _publication(publication: Mapping[str, Any] | None) -> str:
    if not publication:
        return ""
    if not publication["partial"]:
        return f" Published {publication['date']}, complete."
    return f" Published {publication['date']} as a PARTIAL run: {'; '.join(publication['gaps'])}."


def exploratory_mark(entry: Mapping[str, Any]) -> str:
    """`EXPLORATORY` after the verdict of an experiment or item whose verdict rests on an
    amendment made after its seeds' data were seen, else ''."""
    return EXPLORATORY if entry.get("exploratory") else ""


def exploratory_line(entry: Mapping[str, Any]) -> str:
    """Why an item's verdict is exploratory, with what its first-stated measure read ('' when
    it is not, or no reason was recorded)."""
    reason = entry.get("exploratory_reason")
    return f"exploratory: {reason}" if entry.get("exploratory") and reason else ""


def time_cell(entry: Mapping[str, Any]) -> str:
    """An experiment's measured time, with its units' CPU time where it was recorded:
    `12 min (CPU 40 min)`, or `(CPU 40 min, 3 of 5 units)` when not every unit's was."""
    units = entry.get("units") or {}
    cpu = units.get("cpu_seconds")
    if cpu is None:
        return duration(entry["seconds"])
    part = units.get("cpu_units", 0), units.get("count", 0)
    over = "" if part[0] == part[1] else f", {part[0]} of {part[1]} units"
    return f"{duration(entry['seconds'])} (CPU {duration(cpu)}{over})"


def headline(entry: Mapping[str, Any]) -> str:
    return "; ".join(f"{k} = {format_number(v)}" for k, v in entry["headline"].items())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _rule_row(n: int) -> str:
    return "|" + "---|" * n


def verdict_table(document: Mapping[str, Any]) -> list[str]:
    """The short table of one verdict per theory item (item, statement, verdict, and below full
    size the published full-size verdict), linking each item to its row on the page: the table
    the README shows."""
    meta = document["meta"]
    smaller = meta["size"] != "full"
    published = meta.get("compared_with") is not None
    verdict = ["verdict", "full size"] if smaller else ["verdict"]
    header = ["item", "statement", *verdict, "for or against the paper"]
    lines = [_row(header), _rule_row(len(header))]
    for c in document["claim_verdicts"]:
        full = (
            [full_cell(c.get("full_verdict"), published, c.get("full_exploratory", False))]
            if smaller
            else []
        )
        statement = _cell(document["claims"].get(c["id"], ""))
        verdict_cell = f"**{verdict_label(c)}**{exploratory_mark(c)}"
        lines.append(
            _row([c["id"], statement, verdict_cell, *full, direction(c["id"], c["verdict"])])
        )
    return lines


def render_markdown(document: Mapping[str, Any]) -> str:
    """The summary in Markdown: the short verdict table (`verdict_table`), each item's parts
    with their readings, its verdict under each alternative, its links, and the numbers behind
    it, then one row per experiment with its measured time;
    below full size each verdict has the published full one beside it."""
    meta = document["meta"]
    smaller = meta["size"] != "full"
    published = meta.get("compared_with") is not None
    verdict = ["verdict", "full size"] if smaller else ["verdict"]
    numbers = [
        "item",
        "rule: parts (* decided the verdict)",
        "alternatives and links",
        "numbers (95% intervals over seeds)",
    ]
    experiments = ["claims", "experiment", *verdict, "time", "key numbers"]
    lines = [
        f"Claims report ({meta['size']}), {meta['date']}, {meta['machine']}",
        "",
        comparison_line(meta),
        "",
        *verdict_table(document),
        "",
        _row(numbers),
        _rule_row(len(numbers)),
    ]
    for c in document["claim_verdicts"]:
        evidence = "; ".join(
            [*(criterion_evidence(x) for x in c["evidence"]), *excluded_experiments(c)]
        )
        parts = "; ".join(filter(None, [form_line(c), *part_lines(c), exploratory_line(c)]))
        others = "; ".join([*alternative_lines(c), *link_lines(c)]) or "none"
        lines.append(_row([c["id"], _cell(parts), _cell(others), _cell(evidence)]))
    lines += ["", _row(experiments), _rule_row(len(experiments))]
    for e in document["experiments"]:
        full = (
            [full_cell(e.get("full_verdict"), published, e.get("full_exploratory", False))]
            if smaller
            else []
        )
        lines.append(
            _row(
                [
                    ", ".join(e["claims"]),
                    f"{e['id']}: {_cell(e['title'])}",
                    f"**{e['verdict']}**{exploratory_mark(e)}",
                    *full,
                    time_cell(e),
                    _cell(headline(e)),
                ]
            )
        )
    return "\n".join(lines) + "\n"

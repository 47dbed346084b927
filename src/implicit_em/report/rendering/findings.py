r"""`docs/findings.md`: the paper answered point by point, written from a report's document.

One block per theory item (`claims.CLAIMS`: claims C1–C14d, objections R1–R4 and m1–m3, proposed
tests T1–T3), each read from the document's item verdicts (`item_verdicts.claim_verdicts`) and
nothing else:

* **Tested**: the sentence of each part of the item, as its rule quotes it;
* **Measured**: each criterion and gate of each part, its interval, method, seeds and status,
  and the size and machine of the run;
* **Verdict**: the verdict under the item's registered rule, the parts that decided it, and the
  verdict under every registered alternative (robust, or fragile and under which);
* **Strongest rival**: the realistic rivals its criteria were read against (what each lacks) and
  whether each criterion told its rival apart (the negative known-answer control), with the
  baselines that had to work first;
* **What would change it**: for each criterion that voted, how far its interval sits from the
  threshold and how the protocol says it could fail.

With an `earlier` document (the run published before), each block also gives the earlier verdict
and, where it differs, what changed: the rule (the item's parts and criteria), the measurement
(a criterion's estimate), the scale (the size of the run), or the configuration of an experiment
the item reads (its task sizes, models or budgets, named by key: `configuration (E10: budget,
tasks, train)`; seeds and where the run ran are not its configuration). A table ahead of the
blocks (`changes.changes_table`) sets every item's two verdicts side by side with that reason.

`python -m implicit_em.report.rendering.findings PAGE RESULTS [--earlier EARLIER] [--replication
QUICK REPLICATION]` writes the page, with that command in its header; `page_from` returns what
the command would write and `recorded_arguments` reads the command back from a page, so a test
can tell when the page no longer says what its documents say.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.report.items.links import CONFIDENT
from implicit_em.report.judging.item_verdicts import verdict_label
from implicit_em.report.judging.rejudge import rejudge_document
from implicit_em.report.publishing.freshness import read_document
from implicit_em.report.rendering.changes import changes_table, configs_of, id_order, what_changed
from implicit_em.report.rules.claims import CLAIMS, direction

__all__ = [
    "PROGRAM",
    "findings_page",
    "item_block",
    "main",
    "page_from",
    "recorded_arguments",
]

PROGRAM = "python -m implicit_em.report.rendering.findings"
"""The command that writes a findings page, less its arguments."""

KINDS = {"C": "Claim", "R": "Objection", "m": "Minor objection", "T": "Proposed test"}


def _number(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    return f"{x:.3g}"


def _interval(c: Mapping[str, Any]) -> str:
    """`estimate [low, high]` of a criterion entry, or its single value."""
    if c.get("low") is None or c.get("high") is None:
        return _number(c.get("estimate"))
    return f"{_number(c['estimate'])} [{_number(c['low'])}, {_number(c['high'])}]"


def _criterion_line(c: Mapping[str, Any], protocol: Mapping[str, Any]) -> str:
    means = protocol.get("means", "")
    said = f" {means[0].upper()}{means[1:]}." if means else ""
    if c.get("estimate") is None:
        return f"  - `{c['experiment']}:{c['number']}` not measured in this run.{said}"
    method = protocol.get("method_name") or c.get("method") or ""
    seeds = protocol.get("seeds")
    how = f"{method}, {seeds} seeds" if seeds else method
    vote = c.get("vote", "")
    voted = f"votes {vote}" if vote and vote != "no vote" else f"no vote ({c.get('standing', '')})"
    return (
        f"  - `{c['experiment']}:{c['number']}` {_interval(c)} ({how}), needs "
        f"{c['op']} {_number(c['threshold'])}: **{c['status']}**; {voted}.{said}"
    )


def _criteria_of(doc: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {
        (e["id"], c["number"]): c for e in doc.get("experiments", []) for c in e.get("criteria", [])
    }


def _parts_lines(item: Mapping[str, Any], protocols: Mapping[tuple[str, str], Any]) -> list[str]:
    lines = []
    for part in item["parts"]:
        beside = (
            f"; beside the item, casting no vote: {part['beside']}." if part.get("beside") else ""
        )
        lines.append(f"- *{part['id']}*: {part['reading']}" + _reason(part.get("reason")) + beside)
        for c in part["criteria"]:
            lines.append(_criterion_line(c, protocols.get((c["experiment"], c["number"]), {})))
        for g in part["gates"]:
            word = {True: "passed", False: "failed", None: "not measured"}[g["passed"]]
            lines.append(f"  - gate `{g['experiment']}:{g['name']}` {word}: {g['detail']}.")
    return lines


def _reason(reason: str | None) -> str:
    return f" ({reason})" if reason else ""


def _rivals(item: Mapping[str, Any], protocols: Mapping[tuple[str, str], Any]) -> list[str]:
    lines, seen = [], set()
    for part in item["parts"]:
        for c in part["criteria"]:
            control = c.get("negative_control") or {}
            what = control.get("removes") or control.get("why")
            if control.get("kind") != "realistic" or not what or what in seen:
                continue
            seen.add(what)
            negative = (c.get("controls") or {}).get("negative", "not run")
            told = "told apart" if negative == "not met" else "not told apart"
            lines.append(
                f"- `{c['experiment']}:{c['number']}` against a rival without {what}: its "
                f"negative control read **{negative}** ({told})."
            )
            baseline = protocols.get((c["experiment"], c["number"]), {}).get("baseline")
            if baseline:
                lines.append(f"  - first the rival had to work: {baseline['says']}.")
    if not lines:
        lines.append(
            "- None: no criterion of this item was read against a realistic rival "
            "(a trained model or real mechanism lacking just what it detects)."
        )
    return lines


def _margin(c: Mapping[str, Any]) -> str:
    low, high, threshold = c.get("low"), c.get("high"), c.get("threshold")
    if low is None or high is None or not isinstance(threshold, int | float):
        return f"its value {_number(c.get('estimate'))} against {c['op']} {_number(threshold)}"
    if low <= threshold <= high:
        more = c.get("seeds_to_decide")
        return f"its interval straddles {_number(threshold)}" + (
            f" (about {more} seeds would decide it)" if more else ""
        )
    side = high if high < threshold else low
    return f"its interval ends {_number(abs(threshold - side))} from {_number(threshold)}"


def _changes(item: Mapping[str, Any], protocols: Mapping[tuple[str, str], Any]) -> list[str]:
    lines = []
    for part in item["parts"]:
        for c in [] if part.get("beside") else part["criteria"]:
            if c.get("vote", "no vote") == "no vote":
                continue
            how = protocols.get((c["experiment"], c["number"]), {}).get("how_it_could_fail")
            lines.append(
                f"- `{c['experiment']}:{c['number']}`: {_margin(c)}."
                + (f" It could fail if {how[0].lower()}{how[1:]}." if how else "")
            )
    if item.get("fragile_under"):
        lines.append(f"- Reading it under {', '.join(item['fragile_under'])} changes it already.")
    if not lines:
        lines.append(
            "- A criterion that can vote: a measurement with a realistic rival, "
            "or the gate that keeps it from voting passing."
        )
    return lines


def _robustness(item: Mapping[str, Any]) -> str:
    alternatives = [a for a in item.get("alternatives", []) if a.get("available", True)]
    if not alternatives:
        return "No alternative reading is registered for this item."
    kind = {a["id"]: f" (a reading {a['reading']}: cannot flip)" for a in alternatives}
    kind.update({a["id"]: "" for a in alternatives if a.get("reading", "sound") == "sound"})
    shown = "; ".join(f"{a['id']}: {verdict_label(a)}{kind[a['id']]}" for a in alternatives)
    flips = [a["id"] for a in alternatives if a.get("flips")]
    head = (
        f"Fragile: it flips under {', '.join(flips)}."
        if flips
        else "Robust: no sound alternative flips it."
    )
    return f"{head} Under each registered alternative: {shown}."


def _scales(item: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]]) -> str:
    """The scale of each wind-tunnel experiment an item reads, its task sizes and transformer
    (`, on E10: bijection n_symbols = 20, ...; transformer 2 × 64`), or nothing (each criterion
    line gives its seeds)."""
    read = sorted(
        {c["experiment"] for p in item.get("parts", []) for c in [*p["criteria"], *p["gates"]]},
        key=id_order,
    )
    scales: dict[str, list[str]] = {}  # descriptor: the experiments it describes
    for ident in read:
        config = configs.get(ident) or {}
        said = [
            f"{task} " + ", ".join(f"{k} = {v}" for k, v in params.items())
            for task, params in (config.get("tasks") or {}).items()
        ]
        train = config.get("train") or {}
        if said and "n_layer" in train and "n_embd" in train:
            said.append(f"transformer {train['n_layer']} × {train['n_embd']}")
        if said:
            scales.setdefault("; ".join(said), []).append(ident)
    return "".join(f", on {', '.join(ids)}: {said}" for said, ids in scales.items())


def item_block(
    item: Mapping[str, Any],
    protocols: Mapping[tuple[str, str], Any],
    meta: Mapping[str, Any],
    earlier: Mapping[str, Any] | None = None,
    earlier_meta: Mapping[str, Any] | None = None,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    earlier_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The block of one item: tested, measured, verdict, rival, what would change it (with
    `earlier`, the earlier run's verdict and what changed it; `configs` and `earlier_configs`,
    both runs' experiment configurations by id, let it name a changed configuration)."""
    ident = item["id"]
    label = verdict_label(item)
    lines = [
        f"## {ident}: {CLAIMS[ident]}",
        "",
        f"{KINDS[ident[0]]}. **{label}**, {direction(ident, item['verdict'])}"
        + (
            " (exploratory: it stands only once rerun on fresh seeds)"
            if item.get("exploratory")
            else ""
        )
        + ".",
        *[f"Exploratory because {r}." for r in [item.get("exploratory_reason")] if r],
        "",
        *[f"**Logical form.** {f}: {item.get('form_why', '')}.\n" for f in [item.get("form")] if f],
        "**Tested.**",
        *[f"- *{p['id']}*: “{p['quote']}”" for p in item["parts"] if p.get("quote")],
        "",
        f"**Measured** at {meta.get('size', '?')} size ({meta.get('date', '?')})"
        + _scales(item, configs or {})
        + ".",
        *_parts_lines(item, protocols),
        "",
        f"**Verdict.** {item['rule'][0].upper()}{item['rule'][1:]}. "
        + (f"Decided by: {', '.join(item['decided_by'])}. " if item.get("decided_by") else "")
        + _robustness(item),
    ]
    for link in item.get("links", []):
        state = (
            "they contradict each other here" if link["contradicts"] else "no contradiction here"
        )
        lines.append(f"Linked with {link['with']}: {link['reason']} ({state}).")
    lines += ["", "**Strongest rival.**", *_rivals(item, protocols)]
    lines += ["", "**What would change it.**", *_changes(item, protocols)]
    if earlier is not None and earlier_meta is not None:
        why = what_changed(item, earlier, meta, earlier_meta, configs, earlier_configs)
        was = verdict_label(earlier)
        said = f"the same, **{was}**" if why is None else f"**{was}**; changed by the {why}"
        lines += ["", f"**Earlier run** ({earlier_meta.get('date', '?')}): {said}."]
    return "\n".join(lines)


def _standing(meta: Mapping[str, Any]) -> str:
    """What kind of run the page is written from."""
    if meta.get("size") != "full":
        return (
            f"This is a {meta.get('size', '?')}-size report, a scaled copy of the full one: its "
            "verdicts are not the confirmatory ones."
        )
    published = (meta.get("publication") or {}).get("date")
    return (
        f"The published full-size run (published {published or '?'}); "
        "`implicit-em publish --check` says whether it still matches the code and protocols, "
        "and which experiments a confirmatory run under the current protocols must measure again."
    )


def replication_lines(quick: Mapping[str, Any], replication: Mapping[str, Any]) -> list[str]:
    """Which item verdicts of the quick report `quick` the report on other seeds
    `replication` reproduced (both read under the current rules)."""
    quick, replication = rejudge_document(quick), rejudge_document(replication)
    ours = {e["id"]: e for e in quick["claim_verdicts"]}
    theirs = {e["id"]: e for e in replication["claim_verdicts"]}
    shared = [i for i in CLAIMS if i in ours and i in theirs]
    same = [i for i in shared if ours[i]["verdict"] == theirs[i]["verdict"]]
    confident = [i for i in same if ours[i]["verdict"] in CONFIDENT]
    seeds = (replication["meta"].get("replication") or {}).get("label", "other seeds")
    lines = [
        "## Replication on fresh seeds",
        "",
        f"The quick report of {quick['meta'].get('date', '?')} was run again on {seeds} "
        f"({replication['meta'].get('date', '?')}; `results/quick-replication/`). It reproduced "
        f"{len(same)} of {len(shared)} item verdicts: {', '.join(same) or 'none'}; "
        f"{len(confident)} of them a confident verdict ({', '.join(confident) or 'none'}), the "
        "others open (not tested, inconclusive, mixed or fragile) on both.",
    ]
    for i in shared:
        if i not in same:
            lines.append(
                f"- {i}: **{verdict_label(ours[i])}** on the quick seeds, "
                f"**{verdict_label(theirs[i])}** on the replication's."
            )
    return lines


def findings_page(
    doc: Mapping[str, Any],
    earlier: Mapping[str, Any] | None = None,
    command: str = PROGRAM,
    replicated: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> str:
    """The findings page of the report document `doc` (a parsed results.json, read again under
    the current rules), beside the `earlier` published document when given; its header records
    `command`, the command that writes it."""
    doc = rejudge_document(doc)
    meta = doc["meta"]
    earlier_items: dict[str, Any] = {}
    earlier_meta = earlier_configs = None
    if earlier is not None:
        earlier = rejudge_document(earlier)
        earlier_meta = earlier["meta"]
        earlier_items = {e["id"]: e for e in earlier["claim_verdicts"]}
        earlier_configs = configs_of(earlier)
    configs = configs_of(doc)
    items = {e["id"]: e for e in doc["claim_verdicts"]}
    protocols = _criteria_of(doc)
    tally: dict[str, list[str]] = {}
    for ident in CLAIMS:
        if ident in items:
            tally.setdefault(direction(ident, items[ident]["verdict"]), []).append(ident)
    lines = [
        "# Findings: the paper answered point by point",
        "",
        f"<!-- written by `{command}`; do not edit by hand -->",
        "",
        f"From the {meta.get('size', '?')}-size report of {meta.get('date', '?')} on "
        f"{meta.get('machine', '?')}, read under the item rules in force "
        "(`src/implicit_em/report/protocols/items.json`; how they read is in "
        "[the report's guide](report.md)). Each block quotes the sentence tested, says what was "
        "measured, the verdict under its rule and every registered alternative, the realistic "
        "rival it was read against, and what would change it.",
        "",
        _standing(meta),
        "",
        *[
            f"- {d}: {', '.join(tally[d])}"
            for d in ("for the paper", "against the paper", "open")
            if d in tally
        ],
        "",
    ]
    if earlier is not None:
        lines += [
            *changes_table(items, earlier_items, meta, earlier_meta, configs, earlier_configs),
            "",
        ]
    for ident in CLAIMS:
        if ident in items:
            lines += [
                item_block(
                    items[ident],
                    protocols,
                    meta,
                    earlier_items.get(ident),
                    earlier_meta,
                    configs,
                    earlier_configs,
                ),
                "",
            ]
    if replicated is not None:
        lines += replication_lines(*replicated)
    return "\n".join(lines).rstrip() + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGRAM)
    parser.add_argument("page")
    parser.add_argument("results")
    parser.add_argument("--earlier")
    parser.add_argument("--replication", nargs=2, metavar=("QUICK", "REPLICATION"))
    return parser


def recorded_arguments(page: str) -> list[str]:
    """The arguments of the command recorded in a findings page's header (`ValueError` when
    the page records none): rerun with them, the page is written again as it should read."""
    match = re.search(rf"<!-- written by `{re.escape(PROGRAM)}((?: [^`\s]+)*)`", page)
    if match is None:
        raise ValueError("the page records no command that wrote it")
    return match.group(1).split()


def page_from(argv: Sequence[str]) -> tuple[Path, str]:
    """The page the command with arguments `argv` writes: its path and its text (`OSError` or
    `ValueError` when a document cannot be read)."""
    args = _parser().parse_args(list(argv))
    doc = read_document(args.results)
    earlier = read_document(args.earlier) if args.earlier else None
    replicated = tuple(read_document(p) for p in args.replication) if args.replication else None
    command = " ".join([PROGRAM, *argv])
    return Path(args.page), findings_page(doc, earlier, command, replicated)


def main(argv: Iterable[str] | None = None) -> int:
    """`python -m implicit_em.report.rendering.findings PAGE RESULTS [--earlier EARLIER]
    [--replication QUICK REPLICATION]`, or `--again PAGE`: the command PAGE records."""
    argv = list(sys.argv[1:] if argv is None else argv)
    target = None
    try:
        if argv[:1] == ["--again"]:  # `--again PAGE`: PAGE written by the command it records
            if len(argv) != 2:
                raise ValueError("--again: expected one PAGE")
            target = Path(argv[1])
            argv = recorded_arguments(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        path, page = page_from(argv)  # a usage error exits 2 before anything is read
    except (OSError, ValueError) as err:
        print(f"error: RESULTS: expected a report's results.json ({err})", file=sys.stderr)
        return 2
    (target or path).write_text(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

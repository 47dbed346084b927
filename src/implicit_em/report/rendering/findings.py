r"""`docs/findings.md`: the paper answered point by point, written from a report's document.

The page opens with the answers table (`answers.answer_rows`: per item, its sentence in a few
words, the answer for or against the paper or why it is open, the number that decides it with
its interval, and the rival it beat or lost to), the same table the report page and the README
open with. The legend follows (`legend.legend`): every rule an item is read by, stated once.
Then one block per theory item (`claims.CLAIMS`: claims C1–C14d, objections R1–R4 and m1–m3,
proposed tests T1–T3), each read from the document's item verdicts (`item_verdicts.claim_verdicts`)
and holding only what is particular to the item (`blocks.item_block`: its parts, readings,
rivals, alternatives, what would change it, and the earlier run's verdict); what several items
share is written out once, in the first block that shows it.

With an `earlier` document (the run published before), a table ahead of the blocks
(`changes.changes_table`) sets every item's two verdicts side by side with what changed each
verdict that changed: the rule (the item's parts and criteria), the measurement (a criterion's
estimate), the scale (the size of the run), or the configuration of an experiment the item
reads (its task sizes, models or budgets, named by key: `configuration (E10: budget, tasks,
train)`; seeds and where the run ran are not its configuration).

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
from implicit_em.report.rendering.answers import answer_rows, markdown_table
from implicit_em.report.rendering.blocks import Shown, item_block
from implicit_em.report.rendering.changes import changes_table, configs_of, id_order
from implicit_em.report.rendering.legend import legend, legend_markdown
from implicit_em.report.rules.claims import CLAIMS

__all__ = [
    "PROGRAM",
    "findings_page",
    "main",
    "page_from",
    "recorded_arguments",
    "replication_lines",
]

PROGRAM = "python -m implicit_em.report.rendering.findings"
"""The command that writes a findings page, less its arguments."""


def _criteria_of(doc: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {
        (e["id"], c["number"]): c for e in doc.get("experiments", []) for c in e.get("criteria", [])
    }


def _scales(items: Iterable[Mapping[str, Any]], configs: Mapping[str, Mapping[str, Any]]) -> str:
    """The scale of each wind-tunnel experiment the items read, its task sizes and transformer
    (`Task sizes: on E10, E11: bijection n_symbols = 20, ...; transformer 2 × 64.`), or ''
    (each criterion line gives its seeds)."""
    read = sorted(
        {
            c["experiment"]
            for item in items
            for p in item.get("parts", [])
            for c in [*p["criteria"], *p["gates"]]
        },
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
    if not scales:
        return ""
    return (
        "Task sizes"
        + "".join(f", on {', '.join(ids)}: {said}" for said, ids in scales.items())
        + "."
    )


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
    ordered = [items[i] for i in CLAIMS if i in items]
    lines = [
        "# Findings: the paper answered point by point",
        "",
        f"<!-- written by `{command}`; do not edit by hand -->",
        "",
        f"From the {meta.get('size', '?')}-size report of {meta.get('date', '?')} on "
        f"{meta.get('machine', '?')}, read under the item rules in force "
        "(`src/implicit_em/report/protocols/items.json`); [the legend](#how-to-read) says how "
        "to read it.",
        "",
        *markdown_table(answer_rows(ordered)),
        "",
        _standing(meta) + " " + _scales(ordered, configs),
        "",
        "## How to read",
        "",
        *legend_markdown(legend(ordered)),
        "",
        "How each rule reads, with examples: [the report's guide](report.md).",
        "",
    ]
    if earlier is not None:
        lines += [
            *changes_table(items, earlier_items, meta, earlier_meta, configs, earlier_configs),
            "",
        ]
    protocols, shown = _criteria_of(doc), Shown()
    for item in ordered:
        block = item_block(
            item,
            protocols,
            shown,
            earlier_items.get(item["id"]),
            earlier_meta,
            meta,
            configs,
            earlier_configs,
        )
        lines += [block, ""]
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

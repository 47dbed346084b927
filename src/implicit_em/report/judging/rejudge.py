r"""Judging a report again without rerunning it: what was measured, read under the current rules.

Every experiment entry of a results.json keeps what was measured (`numbers`, `samples`, the
known-answer controls' statuses); what is decided from them is computed again: each criterion's
interval and status and the experiment's verdict by its current protocol's rule
(`Protocol.rule`), its gates, and every item verdict by the item registry
(`implicit_em.report.judging.item_verdicts`). The controls' statuses are those of the run (their values
are not published). Two uses:

* `rejudge_folder` (`implicit-em report --rejudge --out FOLDER`): a report folder, such as a quick
  report's `report/`, read again in place under the current protocols and item rules; an
  experiment that was not run, or whose protocol is gone, is kept as it was;
* `rejudge_publication` (`implicit-em publish --rejudge`): only the **judgement-stale**
  experiments of a publication (only their judging code or rule changed since the run,
  `freshness.stale_experiments`), whose samples still describe the current measurement code. A
  verdict judged again is **exploratory**: its rule changed after its data were seen. Each such
  experiment records when it was judged again and what had changed (`rejudged`).

Either way the page is rendered again with the figures it already embeds.
"""

from __future__ import annotations

import base64
import datetime as _dt
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.report.judging.rule import Rule
from implicit_em.report.publishing.freshness import published_document, stale_experiments
from implicit_em.report.rendering.render import report_document
from implicit_em.report.rules.protocol import load_protocol
from implicit_em.report.rules.registration import status as protocol_status
from implicit_em.report.running.build import write_document
from implicit_em.report.running.imports import SOURCE_ROOT
from implicit_em.report.running.keys import judgement_record, keyed
from implicit_em.report.running.registry import Experiment, select

__all__ = ["judged_again", "rejudge_document", "rejudge_folder", "rejudge_publication"]

_FIGURE = re.compile(r'<figure><img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


def judged_again(entry: Mapping[str, Any], rule: Rule) -> dict[str, Any]:
    """A results.json experiment `entry` with its verdict, criteria and gates computed again from
    its `numbers` and `samples` under `rule`; its criteria keep their controls' statuses."""
    numbers, samples = entry.get("numbers", {}), entry["samples"]
    judgement = rule.judge(numbers, samples)
    kept = {c["number"]: c for c in entry.get("criteria", [])}
    try:
        evaluations = rule.evaluate(samples)
    except ValueError:
        evaluations = []  # a sample the rule reads is missing: the verdict says which
    criteria = []
    for evaluation in evaluations:
        before = kept.get(evaluation.criterion.number, {})
        criteria.append(
            {
                **evaluation.as_dict(),
                "controls": before.get("controls"),
                "control_line": before.get("control_line", ""),
            }
        )
    return {
        **entry,
        "criteria": criteria,
        "gates": [g.as_dict() for g in rule.gate_results(numbers)],
        "verdict": judgement.verdict,
        "reason": judgement.reason,
    }


def _current(entry: Mapping[str, Any]) -> dict[str, Any]:
    """`entry` judged again by its current protocol; kept as it was when it was not run or its
    protocol is gone."""
    if entry.get("verdict") == "not run" or not entry.get("samples"):
        return dict(entry)
    try:
        rule = load_protocol(entry["id"]).rule
    except ValueError:
        return dict(entry)
    return judged_again(entry, rule)


def rejudge_document(
    document: Mapping[str, Any], full: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The report `document` (a parsed results.json) with every experiment and item verdict
    computed again; below full size compared with the published full-size `full`."""
    experiments = [_current(e) for e in document["experiments"]]
    meta = {k: v for k, v in document["meta"].items() if k != "compared_with"}
    return report_document(experiments, meta, full)


def rejudge_folder(folder: Path | str, full: Path | str | None = None) -> Path:
    """Rejudge `folder/results.json` in place and write its page and summary again; `full` is
    the published full-size results.json a smaller report is compared with. The figures are
    those of the folder when it has them, else those its page embeds."""
    folder = Path(folder)
    document = published_document(folder)
    if document is None:
        raise ValueError(f"{folder}: no results.json to judge again")
    published = None
    if full is not None and Path(full).parent.resolve() != folder.resolve():
        published = published_document(Path(full).parent)
    judged = rejudge_document(document, published)
    if (folder / "figures").is_dir():
        write_document(judged, folder)
    else:
        with tempfile.TemporaryDirectory() as figures:
            _extract_figures(folder, judged["experiments"], Path(figures))
            write_document(judged, folder, figures=Path(figures))
    return folder / "results.json"


def rejudge_publication(
    folder: Path | str,
    experiments: Sequence[Experiment] | None = None,
    root: Path = SOURCE_ROOT,
) -> list[str]:
    """Judge the judgement-stale experiments of the publication in `folder` again under the
    current rules and rewrite it; returns their ids (none: nothing was written).

    Raises `ValueError` (one line, naming `folder`) when nothing is published there or its
    page does not hold the figures it lists.
    """
    folder = Path(folder)
    document = published_document(folder)
    if document is None:
        raise ValueError(f"--to {folder}: no published report to judge again")
    registry = {e.id: e for e in (select() if experiments is None else experiments)}
    stale = stale_experiments(document, list(registry.values()), root)
    changes = {s.id: s.reason for s in stale if s.kind == "judgement"}
    if not changes:
        return []
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    entries = [
        _rejudged(e, registry[e["id"]], changes[e["id"]], when, root) if e["id"] in changes else e
        for e in document["experiments"]
    ]
    meta = dict(document["meta"])
    publication = dict(meta.get("publication") or {})
    publication["rejudged"] = [*publication.get("rejudged", []), {"date": when, "ids": [*changes]}]
    meta["publication"] = publication
    with tempfile.TemporaryDirectory() as figures:
        _extract_figures(folder, entries, Path(figures))
        write_document(report_document(entries, meta), folder, figures=Path(figures))
    return list(changes)


def _rejudged(
    entry: Mapping[str, Any], experiment: Experiment, changed: str, when: str, root: Path
) -> dict[str, Any]:
    """A published experiment `entry` judged again under `experiment`'s current rule, marked
    exploratory with what had changed."""
    judged = judged_again(entry, experiment.rule)
    return {
        **judged,
        "rule": experiment.rule.statement,
        "meaning": experiment.meaning.get(judged["verdict"], ""),
        "protocol": protocol_status(experiment.protocol).as_dict(),
        "judgement": keyed(judgement_record(experiment.protocol, root)),
        "exploratory": True,
        "exploratory_reason": f"judged again on {when} after its data were seen ({changed})",
        "rejudged": {"date": when, "changed": changed},
    }


def _extract_figures(folder: Path, entries: Sequence[Mapping[str, Any]], out: Path) -> None:
    """Write the figures that `folder/index.html` embeds under `out`, at the paths the
    experiments list (the page shows them in that order)."""
    paths = [f["path"] for e in entries for f in e.get("figures", [])]
    page = folder / "index.html"
    images = _FIGURE.findall(page.read_text(encoding="utf-8")) if page.is_file() else []
    if len(images) != len(paths):
        raise ValueError(
            f"--to {folder}: its index.html embeds {len(images)} figure(s), its results.json "
            f"lists {len(paths)}; publish again from the run's folder instead"
        )
    for path, data in zip(paths, images, strict=True):
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(data))

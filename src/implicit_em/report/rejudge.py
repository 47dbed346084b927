"""Judging a published report again: `implicit-em publish --rejudge`.

When only the judging code or an experiment's rule changed since publication (the experiment is
judgement-stale, `freshness.stale_experiments`), its published per-seed samples and numbers
still describe the current measurement code; `rejudge` computes its verdict, criteria and gates
again from them under the current rule, in seconds. A verdict judged again is **exploratory**:
its rule changed after its data were seen. Each such experiment records when it was judged again
and what had changed (`rejudged`), and the items whose primary criterion it carries follow it.
The known-answer controls' statuses are those of the run (their values are not published).

The page is rendered again with the figures it already embeds.
"""

from __future__ import annotations

import base64
import datetime as _dt
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.report.build import write_document
from implicit_em.report.freshness import published_document, stale_experiments
from implicit_em.report.imports import SOURCE_ROOT
from implicit_em.report.keys import judgement_record, keyed
from implicit_em.report.registration import status as protocol_status
from implicit_em.report.registry import Experiment, select
from implicit_em.report.render import report_document

__all__ = ["rejudge"]

_FIGURE = re.compile(r'<figure><img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


def rejudge(
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
        _judged(e, registry[e["id"]], changes[e["id"]], when, root) if e["id"] in changes else e
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


def _judged(
    entry: Mapping[str, Any], experiment: Experiment, changed: str, when: str, root: Path
) -> dict[str, Any]:
    """A published experiment `entry` with its verdict, criteria and gates computed again from
    its samples and numbers under `experiment`'s current rule."""
    rule = experiment.rule
    numbers, samples = entry["numbers"], entry["samples"]
    judgement = rule.judge(numbers, samples)
    controls = {c["number"]: c for c in entry.get("criteria", [])}
    try:
        evaluations = rule.evaluate(samples)
    except ValueError:
        evaluations = []  # a sample the rule reads is missing: the verdict says which
    criteria = []
    for evaluation in evaluations:
        row = evaluation.as_dict()
        before = controls.get(evaluation.criterion.number, {})
        row["controls"] = before.get("controls")
        row["control_line"] = before.get("control_line", "")
        criteria.append(row)
    return {
        **entry,
        "rule": rule.statement,
        "criteria": criteria,
        "gates": [g.as_dict() for g in rule.gate_results(numbers)],
        "verdict": judgement.verdict,
        "reason": judgement.reason,
        "meaning": experiment.meaning.get(judgement.verdict, ""),
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

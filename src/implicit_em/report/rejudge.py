r"""Rejudging a report without rerunning it: a results.json read again under the current
protocols and item rules.

Every experiment entry keeps what was measured (`numbers`, `samples`, the known-answer controls'
statuses); what is decided from them is computed again: each criterion's interval and status and
the experiment's verdict by its current protocol's rule (`Protocol.rule`), its gates, and every
item verdict by the item registry (`implicit_em.report.item_verdicts`). An experiment that was
not run, or whose protocol is gone, is kept as it was.

`rejudge_folder` does it in place for a report folder (`results.json`, `summary.md`,
`index.html`), such as `results/full` or a quick report's `report/`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from implicit_em.report.build import write_document
from implicit_em.report.protocol import load_protocol
from implicit_em.report.render import report_document

__all__ = ["rejudge", "rejudge_experiment", "rejudge_folder"]


def rejudge_experiment(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One results.json experiment entry judged again from its `numbers` and `samples` by its
    current protocol; its criteria keep their controls' statuses and lines."""
    entry = dict(entry)
    if entry.get("verdict") == "not run" or not entry.get("samples"):
        return entry
    try:
        rule = load_protocol(entry["id"]).rule
    except ValueError:
        return entry
    numbers, samples = entry.get("numbers", {}), entry["samples"]
    judgement = rule.judge(numbers, samples)
    kept = {c["number"]: c for c in entry.get("criteria", [])}
    try:
        evaluations = rule.evaluate(samples)
    except ValueError:
        evaluations = []
    criteria = []
    for e in evaluations:
        old = kept.get(e.criterion.number, {})
        criteria.append(
            {
                **e.as_dict(),
                "controls": old.get("controls"),
                "control_line": old.get("control_line", ""),
            }
        )
    entry.update(
        criteria=criteria,
        gates=[g.as_dict() for g in rule.gate_results(numbers)],
        verdict=judgement.verdict,
        reason=judgement.reason,
    )
    return entry


def rejudge(document: Mapping[str, Any], full: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report `document` (a parsed results.json) with every experiment and item verdict
    computed again; below full size compared with the published full-size `full`."""
    experiments = [rejudge_experiment(e) for e in document["experiments"]]
    meta = {k: v for k, v in document["meta"].items() if k != "compared_with"}
    return report_document(experiments, meta, full)


def rejudge_folder(folder: Path | str, full: Path | str | None = None) -> Path:
    """Rejudge `folder/results.json` in place and write its page and summary again; `full` is
    the published full-size results.json a smaller report is compared with."""
    folder = Path(folder)
    document = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    published = None
    if full is not None and Path(full).is_file():
        published = json.loads(Path(full).read_text(encoding="utf-8"))
    write_document(rejudge(document, published), folder)
    return folder / "results.json"

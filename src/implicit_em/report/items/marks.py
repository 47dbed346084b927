r"""The item marks of a criterion, as its protocol declares them (`protocol.ITEM_MARKS`):

* `by_construction`: one line, when the criterion holds (or is fixed) by algebra or by how the
  experiment is built; it then casts no vote, as a gate would not;
* `negative_control`: its negative control's kind (`controls.NegativeControl`): only a
  `realistic` one (a trained rival lacking exactly the mechanism) lets it vote;
* `baseline`: for a comparison with a rival, the rival's own-task gates (`says`, and `gates` of
  `number`, `op`, `threshold` read from the experiment's `numbers`): a rival that fails its own
  task makes the comparison `inconclusive: baseline failed`.

`attach_marks` copies them onto the criteria of results.json entries, so that the item verdicts
(and a rejudged old results.json) read one document.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.controls import NegativeControl
from implicit_em.report.judging import OPERATORS
from implicit_em.report.protocol import ITEM_MARKS, load_protocol

__all__ = ["attach_marks", "baseline_failures", "marks_hash", "protocol_marks"]


def protocol_marks(experiment: str) -> dict[str, dict[str, Any]]:
    """The item marks of each criterion of `experiment`'s protocol, by number (checked: a
    negative control's kind, a baseline's gates); empty when it has no protocol."""
    try:
        protocol = load_protocol(experiment)
    except ValueError:
        return {}
    out = {}
    for c in protocol.data["criteria"]:
        marks = {k: c[k] for k in ITEM_MARKS if k in c}
        NegativeControl.from_data(marks.get("negative_control"))
        for gate in (marks.get("baseline") or {}).get("gates", []):
            if gate.get("op") not in OPERATORS or "number" not in gate:
                raise ValueError(f"{experiment} {c['number']}: a baseline gate needs number, op")
        out[c["number"]] = marks
    return out


def marks_hash(experiments: Sequence[str]) -> str:
    """SHA-256 (16 hex digits) of the item marks of `experiments`' protocols."""
    blob = json.dumps({e: protocol_marks(e) for e in experiments}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def attach_marks(experiments: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The results.json `experiments` with each criterion's item marks from its protocol (an
    old document's marks are replaced by the current protocol's)."""
    out = []
    for e in experiments:
        marks = protocol_marks(e["id"])
        criteria = [
            {
                **{k: v for k, v in c.items() if k not in ITEM_MARKS},
                **marks.get(c["number"], {}),
            }
            for c in e.get("criteria", [])
        ]
        out.append({**e, "criteria": criteria})
    return out


def baseline_failures(criterion: Mapping[str, Any], numbers: Mapping[str, Any]) -> list[str]:
    """The baseline gates of `criterion` that its experiment's `numbers` fail (a gate whose
    number was not measured fails), each as one line; empty when it has no baseline."""
    failed = []
    for gate in (criterion.get("baseline") or {}).get("gates", []):
        value = numbers.get(gate["number"])
        measured = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not measured or not OPERATORS[gate["op"]](float(value), float(gate["threshold"])):
            shown = f"{value:.3g}" if measured else "not measured"
            failed.append(f"{gate['number']} = {shown} (needs {gate['op']} {gate['threshold']:g})")
    return failed

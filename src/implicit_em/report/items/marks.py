r"""The item marks of a criterion, as its protocol declares them (`protocol.ITEM_MARKS`):

* `by_construction`: one line, when the criterion holds (or is fixed) by algebra or by how the
  experiment is built; it then casts no vote, as a gate would not;
* `negative_control`: its negative control's kind (`controls.NegativeControl`): only a
  `realistic` one (a trained rival lacking exactly the mechanism) lets it vote;
* `baseline`: for a comparison with a rival, the rival's own-task gates (`says`, and `gates` of
  `number`, `op`, `threshold` read from the experiment's `numbers`): a rival that fails its own
  task makes the comparison `inconclusive: baseline failed`;
* `requires`: conditions the measurement needs before it can be read, each with what its failure
  `says` (the standing shown: `not converged`, `not testable on this task`), how the criterion
  `reads` then (`undecided`: its item is inconclusive; `not tested`: it casts no vote) and its
  `gates` (as a baseline's). A run that did not converge, or a task on which the mechanism does
  not matter, is a finding about the measurement, not a bug: it leaves the experiment's verdict
  alone and opens the item's.

`attach_marks` copies them onto the criteria of results.json entries, so that the item verdicts
(and a rejudged old results.json) read one document.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.judging.controls import NegativeControl
from implicit_em.report.judging.rule import OPERATORS
from implicit_em.report.rules.protocol import ITEM_MARKS, load_protocol

__all__ = [
    "REQUIREMENT_READINGS",
    "attach_marks",
    "baseline_failures",
    "failed_requirement",
    "gate_failures",
    "marks_hash",
    "protocol_marks",
]

REQUIREMENT_READINGS = ("undecided", "not tested")
"""How a criterion whose requirement failed is read: its vote undecided, or no vote."""


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
        for condition in marks.get("requires", []):
            _check_requirement(condition, f"{experiment} {c['number']}")
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


def _check_requirement(condition: Mapping[str, Any], where: str) -> None:
    gates = condition.get("gates") or []
    if not condition.get("says") or condition.get("reads") not in REQUIREMENT_READINGS:
        raise ValueError(f"{where}: a requirement needs says and reads in {REQUIREMENT_READINGS}")
    if not gates or any(g.get("op") not in OPERATORS or "number" not in g for g in gates):
        raise ValueError(f"{where}: a requirement needs gates, each with number, op, threshold")


def baseline_failures(criterion: Mapping[str, Any], numbers: Mapping[str, Any]) -> list[str]:
    """The baseline gates of `criterion` that its experiment's `numbers` fail (a gate whose
    number was not measured fails), each as one line; empty when it has no baseline."""
    return gate_failures((criterion.get("baseline") or {}).get("gates", []), numbers)


def failed_requirement(
    criterion: Mapping[str, Any], numbers: Mapping[str, Any]
) -> tuple[Mapping[str, Any], list[str]] | None:
    """The first of `criterion`'s `requires` conditions whose gates `numbers` fail, with the
    failed gates as lines; None when every condition holds (or it requires nothing)."""
    for condition in criterion.get("requires") or []:
        failed = gate_failures(condition["gates"], numbers)
        if failed:
            return condition, failed
    return None


def gate_failures(gates: Sequence[Mapping[str, Any]], numbers: Mapping[str, Any]) -> list[str]:
    """The `gates` (`number`, `op`, `threshold`) that `numbers` fail (a gate whose number was
    not measured fails), each as one line."""
    failed = []
    for gate in gates:
        value = numbers.get(gate["number"])
        measured = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not measured or not OPERATORS[gate["op"]](float(value), float(gate["threshold"])):
            shown = f"{value:.3g}" if measured else "not measured"
            failed.append(f"{gate['number']} = {shown} (needs {gate['op']} {gate['threshold']:g})")
    return failed

r"""Rules and verdicts: sanity gates, criteria judged on intervals over seeds, verdicts per claim.

A `Rule` holds two kinds of check, both fixed before the experiment runs:

* a `Gate` is true by algebra or by implementation (an identity, a closed form, "the model
  trained"); it reads one scalar of the outcome's `numbers`. A failed gate is a bug, not a
  finding: the verdict is `invalid`;
* a `Criterion` is an empirical statement that could come out either way, judged on a 95%
  interval over independent seeds per data set (`implicit_em.report.judging.criterion`); an
  interval over values equal to rounding is `degenerate`, a gate that casts no vote.

The experiment's verdict is `holds` when every criterion is met, `fails` when none is, `partly`
otherwise; a degenerate criterion counts as met when it passes as a gate, not met when it fails
(it still casts no vote on its item). An undecided criterion is resolved both ways: when every resolution gives the same
verdict, that is the verdict; otherwise it is `inconclusive`.

Each criterion bears on one theory item (`claim`) and says whether meeting it `supports` or
`refutes` it; `implicit_em.report.judging.item_verdicts` turns those votes, by each item's registered rule
over the parts of its sentence, into one verdict per item.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from implicit_em.report.judging.criterion import (
    OPERATORS,
    STATUSES,
    Criterion,
    Evaluation,
)
from implicit_em.report.judging.readings import DEGENERATE, format_number

__all__ = [
    "OPERATORS",
    "STATUSES",
    "VERDICTS",
    "Criterion",
    "Evaluation",
    "Gate",
    "GateResult",
    "Judgement",
    "Rule",
]

VERDICTS = ("holds", "partly", "fails", "inconclusive", "invalid", "not run")


@dataclass(frozen=True)
class Judgement:
    """A verdict and the one-line reason computed with it."""

    verdict: str
    reason: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass(frozen=True)
class Gate:
    """A check true by algebra or implementation: `numbers[number] op threshold`."""

    number: str
    op: str
    threshold: float
    means: str
    verifies: str = ""
    """The theory item this gate verifies by algebra (`"C1"`), or empty: a passed gate then
    answers that item `verified (algebra)`."""

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"op must be one of {sorted(OPERATORS)}, got {self.op!r}")

    @property
    def statement(self) -> str:
        return f"{self.number} {self.op} {self.threshold:g} ({self.means})"


@dataclass(frozen=True)
class GateResult:
    """A gate as evaluated: `passed` is None when its number was not measured."""

    gate: Gate
    value: float | None
    passed: bool | None

    def as_dict(self) -> dict[str, Any]:
        g = self.gate
        detail = (
            "not measured"
            if self.value is None
            else f"{g.number} = {format_number(self.value)} (needs {g.op} {g.threshold:g}: {g.means})"
        )
        return {
            "name": g.number,
            "passed": self.passed,
            "detail": detail,
            "verifies": g.verifies,
        }

    @classmethod
    def of(cls, gate: Gate, numbers: Mapping[str, Any]) -> GateResult:
        value = numbers.get(gate.number)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return cls(gate, None, None)
        value = float(value)
        return cls(gate, value, OPERATORS[gate.op](value, gate.threshold))


def _combine(statuses: Sequence[str]) -> str:
    met = sum(s == "met" for s in statuses)
    return "holds" if met == len(statuses) else "fails" if met == 0 else "partly"


@dataclass(frozen=True)
class Rule:
    """Criteria and gates (at least one of them), fixed before the run; `judge` gives the verdict.

    A rule of gates alone (an experiment whose every check is algebra) `holds` when they pass.
    """

    criteria: tuple[Criterion, ...]
    gates: tuple[Gate, ...] = ()

    def __post_init__(self) -> None:
        if not self.criteria and not self.gates:
            raise ValueError("a rule needs at least one criterion or gate")

    @property
    def statement(self) -> str:
        parts = [c.statement for c in self.criteria]
        if not parts:
            gates = "; ".join(g.statement for g in self.gates)
            return f"holds if every gate passes (checks by algebra, none empirical): {gates}."
        if len(parts) == 1:
            text = f"holds if {parts[0]}; fails otherwise"
        else:
            text = f"holds if all of: {'; '.join(parts)}. fails if none is met; partly otherwise"
        text += " (each on a 95% interval over seeds)."
        if self.gates:
            text += " Sanity gates (a failure makes it invalid): "
            text += "; ".join(g.statement for g in self.gates) + "."
        return text

    def gate_results(self, numbers: Mapping[str, Any]) -> list[GateResult]:
        return [GateResult.of(g, numbers) for g in self.gates]

    def evaluate(self, samples: Mapping[str, Sequence[float]]) -> list[Evaluation]:
        """Each criterion's readings (one per data set it reads) and their combined status
        (`Criterion.evaluation`)."""
        return [c.evaluation(c.sample_lists(samples)) for c in self.criteria]

    def judge(
        self, numbers: Mapping[str, Any], samples: Mapping[str, Sequence[float]]
    ) -> Judgement:
        """The verdict from the gates' `numbers` and the criteria's per-seed `samples`."""
        gates = self.gate_results(numbers)
        broken = [g for g in gates if not g.passed]
        if broken:
            return Judgement(
                "invalid", "sanity gate failed: " + "; ".join(g.as_dict()["detail"] for g in broken)
            )
        try:
            evaluations = self.evaluate(samples)
        except ValueError as err:
            return Judgement("not run", str(err))
        if not evaluations:
            passed = "; ".join(g.as_dict()["detail"] for g in gates)
            return Judgement("holds", f"every gate passed: {passed}")
        missing = [e.criterion.number for e in evaluations if e.status is None]
        if missing:
            return Judgement("not run", f"not measured: {', '.join(missing)}")
        # A degenerate criterion counts as its gate: met when its constant passes.
        statuses = [
            e.status if e.status != DEGENERATE else "not met" if e.failed_gates else "met"
            for e in evaluations
        ]
        undecided = [e for e in evaluations if e.status == "undecided"]
        outcomes = {
            _combine([s if s != "undecided" else next(it) for s in statuses])
            for choice in itertools.product(("met", "not met"), repeat=len(undecided))
            for it in [iter(choice)]
        }
        # A number read for two claims (for one, against another) is shown once.
        shown = "; ".join(dict.fromkeys(f"{e.show()}: {e.status}" for e in evaluations))
        if len(outcomes) == 1:
            return Judgement(outcomes.pop(), shown)
        needs = ", ".join(
            f"{e.criterion.number} (about {e.seeds_needed} seeds)"
            if e.seeds_needed
            else f"{e.criterion.number} (more seeds than can be estimated)"
            for e in undecided
        )
        return Judgement("inconclusive", f"{shown}. Undecided, and deciding: {needs}")

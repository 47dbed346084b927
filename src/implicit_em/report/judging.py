r"""Rules and verdicts: sanity gates, criteria judged on intervals over seeds, verdicts per claim.

A `Rule` holds two kinds of check, both fixed before the experiment runs:

* a `Gate` is true by algebra or by implementation (an identity, a closed form, "the model
  trained"); it reads one scalar of the outcome's `numbers`. A failed gate is a bug, not a
  finding: the verdict is `invalid`;
* a `Criterion` is an empirical statement that could come out either way. It reads one value per
  independent seed from the outcome's `samples` and is judged on a 95% interval: `met` when the
  whole interval is on the right side of the threshold, `not met` when it is wholly on the wrong
  side, `undecided` otherwise (also with too few seeds or a NaN).

The experiment's verdict is `holds` when every criterion is met, `fails` when none is, `partly`
otherwise. An undecided criterion is resolved both ways: when every resolution gives the same
verdict, that is the verdict; otherwise it is `inconclusive`.

Each criterion bears on one theory item (`claim`) and says whether meeting it `supports` or
`refutes` it; `implicit_em.report.item_verdicts` turns those votes, by each item's registered rule
over the parts of its sentence, into one verdict per item.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from implicit_em.report.stats import (
    MEAN_METHODS,
    SHARE_METHODS,
    Interval,
    mean_interval,
    seeds_to_decide,
    share_interval,
)

__all__ = [
    "OPERATORS",
    "VERDICTS",
    "Criterion",
    "Evaluation",
    "Gate",
    "GateResult",
    "Judgement",
    "Rule",
]

VERDICTS = ("holds", "partly", "fails", "inconclusive", "invalid", "not run")
STATUSES = ("met", "not met", "undecided")

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
OPERATORS = _OPERATORS
"""The comparison each `op` of a gate or criterion names."""


def _format(value: float | None) -> str:
    if value is None:
        return "n/a"
    if not math.isfinite(value):
        return str(value)
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"


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
        if self.op not in _OPERATORS:
            raise ValueError(f"op must be one of {sorted(_OPERATORS)}, got {self.op!r}")

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
            else f"{g.number} = {_format(self.value)} (needs {g.op} {g.threshold:g}: {g.means})"
        )
        return {
            "name": g.number,
            "passed": bool(self.passed),
            "detail": detail,
            "verifies": g.verifies,
        }

    @classmethod
    def of(cls, gate: Gate, numbers: Mapping[str, Any]) -> GateResult:
        value = numbers.get(gate.number)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return cls(gate, None, None)
        value = float(value)
        return cls(gate, value, _OPERATORS[gate.op](value, gate.threshold))


@dataclass(frozen=True)
class Criterion:
    """An empirical statement judged on an interval over seeds: `mean(samples[number]) op threshold`.

    Attributes
    ----------
    number : str
        Key of the per-seed values in the outcome's `samples`.
    op : {"<=", "<", ">=", ">"}
    threshold : float
    means : str
        What meeting it says, in words.
    claim : str
        The one theory item it bears on ("C1".."C13", "C14a".."C14d", "R1".."R4", "m1".."m3", "T1".."T3").
    direction : {"supports", "refutes"}
        What meeting the criterion says about `claim`.
    method : {"t", "bootstrap", "wilson", "clopper-pearson"}
        Interval of a mean (t, bootstrap) or of a share of 1.0s among 0.0/1.0 samples.
    how_it_could_fail : str
        One line: the outcome that would have made it not met.
    primary : bool
        Whether the protocol registered it as its item's primary criterion. It decides nothing
        on its own: the item's verdict is its registered rule over all its criteria
        (`implicit_em.report.item_verdicts`).
    quote : str
        The sentence of the paper (or of the referee report) it operationalizes, in English,
        with its section: `§4.1: "..."`.
    """

    number: str
    op: str
    threshold: float
    means: str
    claim: str
    direction: str
    method: str = "t"
    how_it_could_fail: str = ""
    primary: bool = False
    quote: str = ""

    def __post_init__(self) -> None:
        if self.op not in _OPERATORS or self.op == "==":
            raise ValueError(f"op must be one of <=, <, >=, >, got {self.op!r}")
        if self.direction not in ("supports", "refutes"):
            raise ValueError(f"direction must be 'supports' or 'refutes', got {self.direction!r}")
        if self.method not in MEAN_METHODS + SHARE_METHODS:
            raise ValueError(
                f"method must be one of {MEAN_METHODS + SHARE_METHODS}, got {self.method!r}"
            )
        if not self.claim or self.claim[0] not in "CRmT":
            raise ValueError(
                f"claim must be a theory item such as 'C1' or 'R2', got {self.claim!r}"
            )

    @property
    def statement(self) -> str:
        return f"{self.number} {self.op} {self.threshold:g} ({self.means})"

    def interval(self, values: Sequence[float]) -> Interval:
        """The 95% interval of the per-seed `values` by this criterion's method."""
        if self.method in MEAN_METHODS:
            return mean_interval(values, self.method)
        if any(math.isnan(v) for v in values):
            return Interval(math.nan, math.nan, math.nan, self.method, len(values))
        if any(v not in (0.0, 1.0) for v in values):
            raise ValueError(f"{self.number}: a share needs 0.0/1.0 samples, got {list(values)}")
        return share_interval(int(sum(values)), len(values), self.method)

    def status(self, interval: Interval) -> str:
        """`met`, `not met` or `undecided` for this interval."""
        if not interval.finite:
            return "undecided"
        right = _OPERATORS[self.op]
        if right(interval.low, self.threshold) and right(interval.high, self.threshold):
            return "met"
        if not right(interval.low, self.threshold) and not right(interval.high, self.threshold):
            return "not met"
        return "undecided"


@dataclass(frozen=True)
class Evaluation:
    """A criterion as judged: its interval and status (None interval: samples missing)."""

    criterion: Criterion
    interval: Interval | None
    status: str | None

    @property
    def vote(self) -> str:
        """`for`, `against` or `undecided`: what this criterion says about its claim."""
        if self.status not in ("met", "not met"):
            return "undecided"
        agrees = (self.status == "met") == (self.criterion.direction == "supports")
        return "for" if agrees else "against"

    @property
    def seeds_needed(self) -> int | None:
        if self.interval is None or self.status != "undecided":
            return None
        return seeds_to_decide(self.interval, self.criterion.threshold)

    def show(self) -> str:
        c, i = self.criterion, self.interval
        if i is None:
            return f"{c.number} not measured"
        return (
            f"{c.number} = {_format(i.estimate)} [{_format(i.low)}, {_format(i.high)}] "
            f"({i.method}, n = {i.n}; needs {c.op} {c.threshold:g})"
        )

    def as_dict(self) -> dict[str, Any]:
        c, i = self.criterion, self.interval
        return {
            "number": c.number,
            "op": c.op,
            "threshold": c.threshold,
            "means": c.means,
            "claim": c.claim,
            "direction": c.direction,
            "how_it_could_fail": c.how_it_could_fail,
            "primary": c.primary,
            "quote": c.quote,
            "value": None if i is None else i.estimate,
            "met": None if self.status is None else self.status == "met",
            "seeds": 0 if i is None else i.n,
            "estimate": None if i is None else i.estimate,
            "low": None if i is None else i.low,
            "high": None if i is None else i.high,
            "method": c.method,
            "status": self.status,
            "seeds_to_decide": self.seeds_needed,
        }


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
        out = []
        for c in self.criteria:
            values = samples.get(c.number)
            if values is None or len(values) == 0:
                out.append(Evaluation(c, None, None))
                continue
            interval = c.interval([float(v) for v in values])
            out.append(Evaluation(c, interval, c.status(interval)))
        return out

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
        undecided = [e for e in evaluations if e.status == "undecided"]
        outcomes = {
            _combine([e.status if e.status != "undecided" else next(it) for e in evaluations])
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

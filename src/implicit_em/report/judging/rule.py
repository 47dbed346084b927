r"""Rules and verdicts: sanity gates, criteria judged on intervals over seeds, verdicts per claim.

A `Rule` holds two kinds of check, both fixed before the experiment runs:

* a `Gate` is true by algebra or by implementation (an identity, a closed form, "the model
  trained"); it reads one scalar of the outcome's `numbers`. A failed gate is a bug, not a
  finding: the verdict is `invalid`;
* a `Criterion` is an empirical statement that could come out either way. It reads one value per
  independent seed from the outcome's `samples` and is judged on a 95% interval by the method its
  protocol names: `met` when the whole interval is on the right side of the threshold, `not met`
  when it is wholly on the wrong side, `undecided` otherwise (also with too few seeds or a NaN).
  A criterion over several data sets reads one interval per data set (never one over the pooled
  seeds) and its `combine` rule says how they make its status; a zero-width interval is
  `degenerate`, a gate that casts no vote (`implicit_em.report.judging.readings`).

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
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from implicit_em.report.judging.readings import (
    COMBINE_RULES,
    DEGENERATE,
    Reading,
    combined_status,
    decisive,
    declared_modes,
    format_number,
)
from implicit_em.report.judging.stats import (
    MEAN_METHODS,
    MEDIAN_METHODS,
    METHOD_NAMES,
    SHARE_METHODS,
    Interval,
    mean_interval,
    median_interval,
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
STATUSES = ("met", "not met", "undecided", DEGENERATE)
METHODS = MEAN_METHODS + MEDIAN_METHODS + SHARE_METHODS

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
OPERATORS = _OPERATORS
"""The comparison each `op` of a gate or criterion names."""


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
        return cls(gate, value, _OPERATORS[gate.op](value, gate.threshold))


@dataclass(frozen=True)
class Criterion:
    """An empirical statement judged on an interval over seeds: `mean(samples[number]) op threshold`
    (the median for the sign test, the share of 1.0s for a share method).

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
    method : {"t", "bootstrap", "bca", "sign-test", "wilson", "clopper-pearson"}
        Interval of a mean (t; bootstrap percentile or BCa, for ratios and few seeds), of a
        median (the exact sign test) or of a share of 1.0s among 0.0/1.0 samples (Wilson;
        Clopper–Pearson, exact, for few seeds); `implicit_em.report.judging.stats`.
    how_it_could_fail : str
        One line: the outcome that would have made it not met.
    primary : bool
        Whether the protocol registered it as its item's primary criterion. It decides nothing
        on its own: the item's verdict is its registered rule over all its criteria
        (`implicit_em.report.judging.item_verdicts`).
    quote : str
        The sentence of the paper (or of the referee report) it operationalizes, in English,
        with its section: `§4.1: "..."`.
    combine : {"", "all"}
        "" reads one list, `samples[number]`; "all" reads one list per data set,
        `samples["<number>@<data set>"]`, and is met only when met on every data set
        (`implicit_em.report.judging.readings`).
    modes_gap : float or None
        Declared width of the gap that separates modes of this quantity (say a seed that
        specialises from one that does not): the page shows each mode's count and mean.
        Display only; the verdict reads the interval.
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
    combine: str = ""
    modes_gap: float | None = None

    def __post_init__(self) -> None:
        if self.op not in _OPERATORS or self.op == "==":
            raise ValueError(f"op must be one of <=, <, >=, >, got {self.op!r}")
        if self.direction not in ("supports", "refutes"):
            raise ValueError(f"direction must be 'supports' or 'refutes', got {self.direction!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.combine not in COMBINE_RULES:
            raise ValueError(f"combine must be one of {COMBINE_RULES}, got {self.combine!r}")
        if self.modes_gap is not None and not self.modes_gap > 0:
            raise ValueError(f"modes_gap must be positive, got {self.modes_gap!r}")
        if not self.claim or self.claim[0] not in "CRmT":
            raise ValueError(
                f"claim must be a theory item such as 'C1' or 'R2', got {self.claim!r}"
            )

    @property
    def statement(self) -> str:
        where = " on every data set" if self.combine == "all" else ""
        return f"{self.number} {self.op} {self.threshold:g}{where} ({self.means})"

    def sample_lists(self, samples: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
        """The per-seed values this criterion reads, by data set ("" when it reads one list);
        empty when they were not measured."""
        if not self.combine:
            values = samples.get(self.number)
            return {"": [float(v) for v in values]} if values else {}
        prefix = f"{self.number}@"
        return {
            key[len(prefix) :]: [float(v) for v in values]
            for key, values in sorted(samples.items())
            if key.startswith(prefix) and values
        }

    def interval(self, values: Sequence[float]) -> Interval:
        """The 95% interval of the per-seed `values` by this criterion's method."""
        if self.method in MEAN_METHODS:
            return mean_interval(values, self.method)
        if self.method in MEDIAN_METHODS:
            return median_interval(values)
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

    def reading(self, label: str, values: Sequence[float]) -> Reading:
        """The reading of one list of per-seed `values` (one data set's, `label`): its
        interval and status, `degenerate` when the interval has zero width."""
        interval = self.interval(values)
        if interval.degenerate:
            passed = _OPERATORS[self.op](interval.estimate, self.threshold)
            return Reading(label, interval, DEGENERATE, tuple(values), passed)
        return Reading(label, interval, self.status(interval), tuple(values))


@dataclass(frozen=True)
class Evaluation:
    """A criterion as judged: its interval and status (None interval: samples missing).

    With several `readings` (one per data set) `interval` is the decisive one's
    (`readings.decisive`) and `status` their combination (`readings.combined_status`).
    """

    criterion: Criterion
    interval: Interval | None
    status: str | None
    readings: tuple[Reading, ...] = ()

    @property
    def failed_gates(self) -> list[Reading]:
        """Its degenerate readings whose constant is on the wrong side of the threshold."""
        return [r for r in self.readings if r.status == DEGENERATE and not r.passed]

    @property
    def vote(self) -> str:
        """`for`, `against` or `undecided`: what this criterion says about its claim."""
        if self.status not in ("met", "not met"):
            return "undecided"
        agrees = (self.status == "met") == (self.criterion.direction == "supports")
        return "for" if agrees else "against"

    @property
    def seeds_needed(self) -> int | None:
        """About how many seeds per data set would decide it (None: not undecided, or cannot
        be said)."""
        if self.interval is None or self.status != "undecided":
            return None
        if not self.readings:
            return seeds_to_decide(self.interval, self.criterion.threshold)
        needs = [
            seeds_to_decide(r.interval, self.criterion.threshold, r.values)
            for r in self.readings
            if r.status == "undecided"
        ]
        return None if None in needs else max(needs)

    def show(self) -> str:
        c, i = self.criterion, self.interval
        if i is None:
            return f"{c.number} not measured"
        shown = (
            "; ".join(r.show() for r in self.readings)
            if self.readings
            else f"{format_number(i.estimate)} [{format_number(i.low)}, {format_number(i.high)}] "
            f"({i.method}, n = {i.n})"
        )
        return f"{c.number} = {shown} (needs {c.op} {c.threshold:g})"

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
            "method_name": METHOD_NAMES[c.method],
            "combine": c.combine,
            "status": self.status,
            "seeds_to_decide": self.seeds_needed,
            "readings": [r.as_dict() for r in self.readings],
            "modes": declared_modes(self.readings, c.modes_gap),
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
        """Each criterion's readings (one per data set it reads) and their combined status."""
        out = []
        for c in self.criteria:
            lists = c.sample_lists(samples)
            if not lists:
                out.append(Evaluation(c, None, None))
                continue
            readings = tuple(c.reading(label, values) for label, values in lists.items())
            status = combined_status(readings, c.combine)
            out.append(
                Evaluation(
                    c, decisive(readings, status, c.op in (">=", ">")).interval, status, readings
                )
            )
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

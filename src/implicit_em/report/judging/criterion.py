r"""Criteria: empirical statements judged on intervals over seeds, and their evaluations.

A `Criterion` reads one value per independent seed (or declared unit) from an outcome's
`samples` and is judged on a 95% interval by the method its protocol names (`stats`): `met` when
the whole interval is on the right side of the threshold, `not met` when it is wholly on the
wrong side, `undecided` otherwise (also with too few seeds or a NaN). A criterion over several data
sets reads one interval per data set (never one over the pooled seeds) and its `combine` rule says
how they make its status; an interval over values equal to rounding is `degenerate`, a gate that
casts no vote (`implicit_em.report.judging.readings`). A quantity with declared `bounds` (a share
in $[0, 1]$, a KL $\ge 0$) has its values checked against them and its interval kept inside.

`Criterion.evaluation` is the one function that reads a criterion's sample lists: the
experiment's rule (`rule.Rule.evaluate`), each alternative of an item (`items.alternatives`) and
each known-answer control (`controls.status_of`) read through it, degeneracy included.
"""

from __future__ import annotations

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
    UNBOUNDED,
    Bounds,
    Interval,
    mean_interval,
    median_interval,
    seeds_to_decide,
    share_interval,
)

__all__ = ["METHODS", "OPERATORS", "STATUSES", "Criterion", "Evaluation", "Units"]

STATUSES = ("met", "not met", "undecided", DEGENERATE)
METHODS = MEAN_METHODS + MEDIAN_METHODS + SHARE_METHODS

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
"""The comparison each `op` of a gate or criterion names."""


@dataclass(frozen=True)
class Units:
    """What one value of a criterion's sample list (per data set) stands for: one element of
    the product of the configuration lists that `per` names (dotted paths into a size's
    configuration; every seed unless declared otherwise), or, where `subset` says which, one
    element that qualifies (then at most that many)."""

    per: tuple[str, ...] = ("seeds",)
    subset: str = ""

    def count(self, config: Mapping[str, Any]) -> int:
        """How many units `config` has: the product of the lengths of the lists `per` names."""
        n = 1
        for path in self.per:
            found: Any = config
            for key in path.split("."):
                found = found[key]
            n *= len(found)
        return n

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | Units) -> Units:
        """From a protocol's `units` entry (`{"per": [...], "subset": "..."}`)."""
        if isinstance(data, Units):
            return data
        unknown = set(data) - {"per", "subset"}
        if unknown or not data.get("per"):
            raise ValueError(f"units must be {{'per': [paths], 'subset': ''}}, got {data!r}")
        return cls(tuple(str(p) for p in data["per"]), str(data.get("subset", "")))


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
    bounds : (low, high) or None
        The range the quantity cannot leave (`[0, 1]` for a share, `[0, None]` for a KL; None
        an open end): a value outside it is an error and its interval is kept inside it
        (`stats`). A share method's range is [0, 1] by construction.
    units : Units
        What each of its per-seed values stands for: one per seed unless the protocol
        declares other units (`{"per": ["topk.seeds"]}`, or runs that qualify among
        `{"per": ["moe.arms", "seeds"], "subset": "..."}`). Checked, not read by the verdict.
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
    bounds: tuple[float | None, float | None] | None = None
    units: Units = Units()

    def __post_init__(self) -> None:
        if self.op not in OPERATORS or self.op == "==":
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
        object.__setattr__(self, "units", Units.from_data(self.units))
        if self.bounds is not None:
            if len(self.bounds) != 2:
                raise ValueError(f"bounds must be [low, high], got {self.bounds!r}")
            object.__setattr__(self, "bounds", tuple(self.bounds))
            low, high = self.limits
            if not low < high:
                raise ValueError(f"bounds must have low < high, got {self.bounds!r}")
            if self.method in SHARE_METHODS and (low, high) != (0.0, 1.0):
                raise ValueError(f"a share lies in [0, 1], not {self.bounds!r}")

    @property
    def limits(self) -> Bounds:
        """`bounds` as numbers, an open end infinite (unbounded when none is declared)."""
        if self.bounds is None:
            return UNBOUNDED
        low, high = self.bounds
        return (-math.inf if low is None else float(low), math.inf if high is None else float(high))

    @classmethod
    def from_record(cls, record: Mapping[str, Any], threshold: float | None = None) -> Criterion:
        """The criterion a results.json criterion `record` was judged by (`Evaluation.as_dict`),
        at `threshold` (its own when None)."""
        return cls(
            number=record["number"],
            op=record["op"],
            threshold=float(record["threshold"] if threshold is None else threshold),
            means=record.get("means", ""),
            claim=record["claim"],
            direction=record["direction"],
            method=record.get("method") or "t",
            how_it_could_fail=record.get("how_it_could_fail", ""),
            primary=bool(record.get("primary")),
            quote=record.get("quote", ""),
            combine=record.get("combine") or "",
            modes_gap=record.get("modes_gap"),
            bounds=record.get("bounds"),
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
            return mean_interval(values, self.method, bounds=self.limits)
        if self.method in MEDIAN_METHODS:
            return median_interval(values, bounds=self.limits)
        if any(math.isnan(v) for v in values):
            return Interval(math.nan, math.nan, math.nan, self.method, len(values))
        if any(v not in (0.0, 1.0) for v in values):
            raise ValueError(f"{self.number}: a share needs 0.0/1.0 samples, got {list(values)}")
        return share_interval(int(sum(values)), len(values), self.method)

    def status(self, interval: Interval) -> str:
        """`met`, `not met` or `undecided` for this interval."""
        if not interval.finite:
            return "undecided"
        right = OPERATORS[self.op]
        if right(interval.low, self.threshold) and right(interval.high, self.threshold):
            return "met"
        if not right(interval.low, self.threshold) and not right(interval.high, self.threshold):
            return "not met"
        return "undecided"

    def reading(self, label: str, values: Sequence[float]) -> Reading:
        """The reading of one list of per-seed `values` (one data set's, `label`): its
        interval and status, `degenerate` when its values are equal to rounding
        (`stats.Interval.degenerate`)."""
        interval = self.interval(values)
        if interval.degenerate:
            passed = OPERATORS[self.op](interval.estimate, self.threshold)
            return Reading(label, interval, DEGENERATE, tuple(values), passed)
        return Reading(label, interval, self.status(interval), tuple(values))

    def evaluation(self, lists: Mapping[str, Sequence[float]]) -> Evaluation:
        """This criterion judged on its per-seed value `lists` by data set (`sample_lists`):
        one reading each, combined by `combine`; not measured (no interval) without lists."""
        if not lists:
            return Evaluation(self, None, None)
        readings = tuple(self.reading(label, values) for label, values in lists.items())
        status = combined_status(readings, self.combine)
        upward = self.op in (">=", ">")
        return Evaluation(self, decisive(readings, status, upward).interval, status, readings)


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
            "method_name": METHOD_NAMES[c.method if i is None else i.method],
            "combine": c.combine,
            "bounds": None if c.bounds is None else list(c.bounds),
            "modes_gap": c.modes_gap,
            "status": self.status,
            "seeds_to_decide": self.seeds_needed,
            "readings": [r.as_dict() for r in self.readings],
            "modes": declared_modes(self.readings, c.modes_gap),
        }

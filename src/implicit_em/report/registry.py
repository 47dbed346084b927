r"""The registry of the claims report: experiments, the rules that judge them, their outcomes.

An `Experiment` names the claims it tests (the C/R/T/m IDs of `docs/theory.md`), states
its hypothesis and its `Rule` *before* it runs, and has a `run(config, out)` that
measures: it returns an `Outcome` (numbers, tables, figures) and never a verdict. The
verdict is computed afterwards by `rule.judge(outcome.numbers)`:

* `holds`: every criterion of the rule is met;
* `fails`: none is;
* `partly`: some are, and the reason names those that are not;
* `not run`: the experiment crashed, or a number a criterion reads was not measured.

Adding an experiment is one new module under `implicit_em.report.experiments` that calls
`register`, plus one import line in that package.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "REGISTRY",
    "SIZES",
    "VERDICTS",
    "Criterion",
    "Experiment",
    "Figure",
    "Judgement",
    "Outcome",
    "Rule",
    "Table",
    "register",
    "select",
]

VERDICTS = ("holds", "fails", "partly", "not run")
SIZES = ("smoke", "quick", "full")
"""`smoke`: seconds, for the test suite; `quick`: the default report; `full`: publication."""

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}

Config = Mapping[str, Any]
Numbers = Mapping[str, Any]


@dataclass(frozen=True)
class Judgement:
    """A verdict and the one-line reason computed with it."""

    verdict: str
    reason: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass(frozen=True)
class Criterion:
    """One measured number compared with a threshold fixed in advance: `numbers[number] op threshold`.

    Attributes
    ----------
    number : str
        Key of the number in the outcome's `numbers`.
    op : {"<=", "<", ">=", ">"}
        The comparison that must hold.
    threshold : float
        The bound, stated before the experiment runs.
    means : str
        What meeting the criterion says, in words ("the preconditioned path is EM's").
    """

    number: str
    op: str
    threshold: float
    means: str

    def __post_init__(self) -> None:
        if self.op not in _OPERATORS:
            raise ValueError(f"op must be one of {sorted(_OPERATORS)}, got {self.op!r}")

    @property
    def statement(self) -> str:
        return f"{self.number} {self.op} {self.threshold:g} ({self.means})"

    def value(self, numbers: Numbers) -> float | None:
        """The measured value, or None when it is absent or not a finite number."""
        value = numbers.get(self.number)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if math.isfinite(value) else None

    def met(self, numbers: Numbers) -> bool | None:
        """Whether the criterion holds; None when its number was not measured."""
        value = self.value(numbers)
        return None if value is None else _OPERATORS[self.op](value, self.threshold)


@dataclass(frozen=True)
class Rule:
    """A verdict rule: criteria fixed before the run, combined as holds / partly / fails.

    `holds` when every criterion is met, `fails` when none is, `partly` otherwise; a
    criterion whose number is missing or not finite makes the verdict `not run`.
    """

    criteria: tuple[Criterion, ...]

    def __post_init__(self) -> None:
        if not self.criteria:
            raise ValueError("a rule needs at least one criterion")

    @property
    def statement(self) -> str:
        parts = [c.statement for c in self.criteria]
        if len(parts) == 1:
            return f"holds if {parts[0]}; fails otherwise."
        listed = "; ".join(parts)
        return f"holds if all of: {listed}. fails if none is met; partly otherwise."

    def judge(self, numbers: Numbers) -> Judgement:
        """Compute the verdict from the measured `numbers`."""
        missing = [c.number for c in self.criteria if c.met(numbers) is None]
        if missing:
            return Judgement("not run", f"not measured: {', '.join(missing)}")
        met = [c for c in self.criteria if c.met(numbers)]
        unmet = [c for c in self.criteria if not c.met(numbers)]

        def show(c: Criterion) -> str:
            return f"{c.number} = {_format(c.value(numbers))} (needs {c.op} {c.threshold:g})"

        if not unmet:
            return Judgement("holds", "; ".join(show(c) for c in met))
        if not met:
            return Judgement("fails", "; ".join(show(c) for c in unmet))
        return Judgement(
            "partly",
            "met: "
            + "; ".join(show(c) for c in met)
            + ". not met: "
            + "; ".join(show(c) for c in unmet),
        )


@dataclass(frozen=True)
class Table:
    """A table of measurements: `rows` of values under `columns`."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(
                    f"table {self.title!r}: a row has {len(row)} values for {len(self.columns)} columns"
                )

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Table:
        return cls(data["title"], tuple(data["columns"]), tuple(tuple(r) for r in data["rows"]))


@dataclass(frozen=True)
class Figure:
    """A figure the experiment wrote: `path` relative to its output folder, with a caption."""

    path: str
    caption: str


@dataclass
class Outcome:
    """What an experiment measured.

    Attributes
    ----------
    numbers : dict
        JSON-serializable measurements (floats, ints, strings, lists of them). The rule reads
        its criteria's numbers here; the rest are reported.
    tables : list of Table
    figures : list of Figure
        PNG files written under the experiment's output folder.
    notes : list of str
        Observations computed from the numbers (each states the values it rests on).
    """

    numbers: dict[str, Any]
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Experiment:
    """One entry of the claims report.

    Attributes
    ----------
    id : str
        `"E1"`, `"E2"`, ...
    title : str
    claims : tuple of str
        The claim, objection and test IDs it bears on (`("R1", "T2")`).
    hypothesis : str
        One sentence, stated before the run.
    setup : str
        Data, models and sizes, in words.
    rule : Rule
        How the verdict follows from the numbers, fixed in advance.
    run : callable
        `run(config, out) -> Outcome`; `out` is a folder for its figures, `config` one of
        `configs` plus `"device"`.
    configs : mapping
        The `smoke`, `quick` and `full` configurations (JSON-serializable).
    headline : tuple of str
        Numbers shown in the summary table.
    meaning : mapping
        For each of `holds`, `partly` and `fails`: what the verdict says about the claims.
    minutes : mapping
        Expected minutes per size on a 2-core CPU, used to announce how long a report takes.
    """

    id: str
    title: str
    claims: tuple[str, ...]
    hypothesis: str
    setup: str
    rule: Rule
    run: Callable[[Config, Path], Outcome]
    configs: Mapping[str, Config]
    headline: tuple[str, ...]
    meaning: Mapping[str, str]
    minutes: Mapping[str, float]

    def __post_init__(self) -> None:
        if set(self.configs) != set(SIZES):
            raise ValueError(f"{self.id}: configs must have exactly the sizes {SIZES}")
        if set(self.minutes) != set(SIZES):
            raise ValueError(f"{self.id}: minutes must have exactly the sizes {SIZES}")
        if set(self.meaning) != {"holds", "partly", "fails"}:
            raise ValueError(f"{self.id}: meaning must say what holds, partly and fails mean")
        if not self.claims:
            raise ValueError(f"{self.id}: an experiment tests at least one claim")

    def judge(self, outcome: Outcome) -> Judgement:
        return self.rule.judge(outcome.numbers)


REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add `experiment` to `REGISTRY` (ids are unique)."""
    if experiment.id in REGISTRY:
        raise ValueError(f"experiment {experiment.id!r} is already registered")
    REGISTRY[experiment.id] = experiment
    return experiment


def select(ids: Sequence[str] | None = None) -> list[Experiment]:
    """The registered experiments with these ids (all when None), in registry order."""
    import implicit_em.report.experiments  # noqa: F401  (registers every experiment)

    if not ids:
        return sorted(REGISTRY.values(), key=_order)
    wanted = [i.strip().upper() for i in ids if i.strip()]
    unknown = [i for i in wanted if i not in REGISTRY]
    if unknown:
        known = ", ".join(e.id for e in sorted(REGISTRY.values(), key=_order))
        raise ValueError(f"unknown experiment id(s) {', '.join(unknown)}; known: {known}")
    return [e for e in sorted(REGISTRY.values(), key=_order) if e.id in wanted]


def _order(experiment: Experiment) -> tuple[int, str]:
    digits = "".join(ch for ch in experiment.id if ch.isdigit())
    return (int(digits) if digits else 0, experiment.id)


def _format(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.4g}"
    return f"{value:.3e}"

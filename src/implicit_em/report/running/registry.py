r"""The registry of the claims report: experiments, their outcomes, and the explicit list of them.

An `Experiment` names the claims it tests (the C/R/T/m IDs of `docs/theory.md`), states
its hypothesis, and measures in two steps: `plan(config)` states its work as units (a
module-level function with plain-JSON arguments each, `implicit_em.report.running.plan`), which any
process may compute, and `aggregate(config, results, out)` turns the units' JSON values into an
`Outcome` (scalar `numbers` for gates and display, per-seed `samples` for the criteria, tables,
figures), never a verdict. Its rule, seeds, budgets and data sizes are not in its module: they are its protocol
(`implicit_em.report.rules.protocol`, the data file `protocols/<ID>.json`), registered before the
confirmatory run. Each criterion comes with its known-answer `Controls`
(`implicit_em.report.judging.controls`), written in the experiment's module beside the measurement code
they run.

Adding an experiment is one new module under `implicit_em.report.experiments` that defines
`EXPERIMENT = Experiment(...)`, its protocol file, and one line in that package's `MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from implicit_em.report import experiments
from implicit_em.report.judging.controls import Controls
from implicit_em.report.judging.rule import Judgement, Rule
from implicit_em.report.rules.protocol import Protocol, load_protocol
from implicit_em.report.running.plan import Unit, compute

__all__ = [
    "SIZES",
    "Experiment",
    "Figure",
    "Outcome",
    "Table",
    "select",
]

SIZES = ("smoke", "quick", "full")
"""`smoke`: seconds, for the test suite; `quick`: the default report; `full`: publication."""

Config = Mapping[str, Any]


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
        JSON-serializable measurements (floats, ints, strings, lists of them). The rule's
        gates read their scalars here; the rest are reported.
    samples : dict of str to list of float
        For every quantity a criterion reads, one value per independent unit (seed, or seed x
        data set); shares are lists of 0.0/1.0. Non-finite values are kept (the criterion is
        then undecided).
    tables : list of Table
    figures : list of Figure
        PNG files written under the experiment's output folder.
    notes : list of str
        Observations computed from the numbers (each states the values it rests on).
    """

    numbers: dict[str, Any]
    samples: dict[str, list[float]] = field(default_factory=dict)
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
    plan : callable
        `plan(config) -> Sequence[Unit]`: its work as units (`implicit_em.report.running.plan`),
        `config` one of `configs` plus `"device"`.
    aggregate : callable
        `aggregate(config, results, out) -> Outcome`: the outcome from the units' JSON values
        (`results`, by unit name); `out` is a folder for its figures.
    headline : tuple of str
        Numbers shown in the summary table.
    meaning : mapping
        For each of `holds`, `partly` and `fails`: what the verdict says about the claims.
    minutes : mapping
        Expected minutes per size on a 2-core CPU, used to announce how long a report takes.
    controls : mapping of str to Controls
        The known-answer controls of each criterion, by the criterion's number.
    data_sets : tuple of str
        The data sets it measures on, by the names its per-data-set samples carry
        (`<number>@<data set>`); required when a criterion reads one list per data set.
    """

    id: str
    title: str
    claims: tuple[str, ...]
    hypothesis: str
    setup: str
    plan: Callable[[Config], Sequence[Unit]]
    aggregate: Callable[[Config, Mapping[str, Any], Path], Outcome]
    headline: tuple[str, ...]
    meaning: Mapping[str, str]
    minutes: Mapping[str, float]
    controls: Mapping[str, Controls] = field(default_factory=dict)
    protocol: Protocol | None = None
    """Its protocol; None reads the registered file `protocols/<ID>.json`."""
    data_sets: tuple[str, ...] = ()

    @property
    def rule(self) -> Rule:
        """How the verdict follows from the numbers: the protocol's gates and criteria."""
        assert self.protocol is not None
        return self.protocol.rule

    @property
    def configs(self) -> Mapping[str, Config]:
        """The configuration at each size (and of the controls), from the protocol."""
        assert self.protocol is not None
        return self.protocol.sizes

    def __post_init__(self) -> None:
        if self.protocol is None:
            object.__setattr__(self, "protocol", load_protocol(self.id))
        unknown = set(self.controls) - {c.number for c in self.rule.criteria}
        if unknown:
            raise ValueError(
                f"{self.id}: controls for numbers no criterion reads: {sorted(unknown)}"
            )
        if set(self.minutes) != set(SIZES):
            raise ValueError(f"{self.id}: minutes must have exactly the sizes {SIZES}")
        if set(self.meaning) != {"holds", "partly", "fails"}:
            raise ValueError(f"{self.id}: meaning must say what holds, partly and fails mean")
        if not self.claims:
            raise ValueError(f"{self.id}: an experiment tests at least one claim")
        per_data_set = [c.number for c in self.rule.criteria if c.combine]
        if per_data_set and not self.data_sets:
            raise ValueError(
                f"{self.id}: {', '.join(per_data_set)} read one list per data set; "
                "name its data sets (data_sets)"
            )

    def judge(self, outcome: Outcome) -> Judgement:
        return self.rule.judge(outcome.numbers, outcome.samples)

    def run(self, config: Config, out: Path) -> Outcome:
        """Plan, compute every unit in this process (no cache) and aggregate: the outcome a
        report run would give, for tests and scripts. A unit that raises raises here."""
        results = {}
        for unit in self.plan(config):
            done = compute(unit)
            if done.error is not None:
                raise RuntimeError(f"{self.id} unit {unit.name} failed:\n{done.error}")
            results[unit.name] = done.value
        return self.aggregate(config, results, out)


def select(ids: Sequence[str] | None = None) -> list[Experiment]:
    """The listed experiments (`experiments.MODULES`) with these ids (all when None), in
    report order."""
    ordered = sorted(
        (
            importlib.import_module(f"{experiments.__name__}.{m}").EXPERIMENT
            for m in experiments.MODULES
        ),
        key=_order,
    )
    if not ids:
        return ordered
    wanted = [i.strip().upper() for i in ids if i.strip()]
    known = {e.id for e in ordered}
    unknown = [i for i in wanted if i not in known]
    if unknown:
        raise ValueError(
            f"unknown experiment id(s) {', '.join(unknown)}; known: {', '.join(e.id for e in ordered)}"
        )
    return [e for e in ordered if e.id in wanted]


def _order(experiment: Experiment) -> tuple[int, str]:
    digits = "".join(ch for ch in experiment.id if ch.isdigit())
    return (int(digits) if digits else 0, experiment.id)

r"""Known-answer controls: how a criterion earns its vote.

Every criterion of the claims report has two controls, each an input built so that its answer is
known, run through the experiment's own measurement code at the small `control` size of its
protocol:

* the **positive** control plants the effect the criterion looks for; it must come out `met`;
* the **negative** control removes it (or plants its opposite); it must come out `not met`.

A control is a function `measure(config) -> per-seed values of the criterion's number`, where
`config` is the protocol's `control` configuration. Its values are judged by the criterion
itself (same threshold, same interval method), so a control exercises the measurement and the
judge together, never the judge alone. A criterion whose controls do not both come out as
planted casts no vote (`implicit_em.report.judging.item_verdicts.controls_pass`): it has not shown that it can
tell the effect from its absence.

A negative control is of one of two kinds (`NegativeControl`, declared per criterion in its
protocol as `negative_control`):

* **realistic**: a trained model or a real mechanism that lacks exactly what the criterion
  detects, at the same size and on the same data; it says what it `removes`;
* **trivial**: an untrained model, a planted perturbation, constant units, a permutation null,
  other data: kept as a sanity gate only, it says `why` it is trivial.

A criterion whose negative control is trivial casts no vote on its item: telling an effect from
nothing is not telling it from the next-best explanation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from implicit_em.report.judging.readings import DEGENERATE
from implicit_em.report.judging.rule import OPERATORS, Criterion

__all__ = [
    "NEGATIVE_KINDS",
    "Control",
    "Controls",
    "NegativeControl",
    "control_statuses",
    "status_of",
]

NEGATIVE_KINDS = ("realistic", "trivial")

Config = Mapping[str, Any]


@dataclass(frozen=True)
class Control:
    """One known-answer input: `says` what was planted (or removed), in one line; `measure`
    returns one value of the criterion's number per seed of the `control` configuration."""

    says: str
    measure: Callable[[Config], Sequence[float]]


@dataclass(frozen=True)
class Controls:
    """The positive (must be `met`) and negative (must be `not met`) control of one criterion."""

    positive: Control
    negative: Control

    def values(self, config: Config) -> dict[str, list[float]]:
        """Both controls run on `config`: `{"positive": [...], "negative": [...]}`, one value
        of the criterion's number per control seed."""
        return {
            kind: [float(v) for v in getattr(self, kind).measure(config)]
            for kind in ("positive", "negative")
        }

    @property
    def line(self) -> str:
        """The one line the page shows: what each control plants."""
        return f"positive: {self.positive.says}; negative: {self.negative.says}"


@dataclass(frozen=True)
class NegativeControl:
    """What a criterion's negative control is: `realistic` (then `removes` names the one
    mechanism it lacks) or `trivial` (then `why` says what makes it so)."""

    kind: str
    removes: str = ""
    why: str = ""

    def __post_init__(self) -> None:
        if self.kind not in NEGATIVE_KINDS:
            raise ValueError(
                f"negative_control kind must be one of {NEGATIVE_KINDS}, got {self.kind!r}"
            )
        if self.kind == "realistic" and not self.removes:
            raise ValueError("a realistic negative control must say what it removes")
        if self.kind == "trivial" and not self.why:
            raise ValueError("a trivial negative control must say why it is trivial")

    @property
    def realistic(self) -> bool:
        return self.kind == "realistic"

    @property
    def line(self) -> str:
        """One line: `realistic, removes: ...` or `trivial: ...`."""
        return f"realistic, removes: {self.removes}" if self.realistic else f"trivial: {self.why}"

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> NegativeControl | None:
        """From a protocol's `negative_control` entry (None when the criterion has none)."""
        if data is None:
            return None
        return cls(str(data.get("kind")), str(data.get("removes", "")), str(data.get("why", "")))


def status_of(criterion: Criterion, values: Sequence[float]) -> str:
    """A control's status: its per-seed `values` read by `criterion` as the experiment reads
    its own (`Criterion.reading`), undecided with none or with a NaN. A control whose seeds
    all agree (a degenerate reading, or every seed at a bound) is `met` when its constant
    passes, `not met` when not: a planted answer may be exact."""
    values = [float(v) for v in values]
    if not values or any(math.isnan(v) for v in values):
        return "undecided"
    reading = criterion.reading("", values)
    if reading.status == DEGENERATE or reading.interval.method == "unanimous":
        passed = OPERATORS[criterion.op](reading.interval.estimate, criterion.threshold)
        return "met" if passed else "not met"
    return reading.status


def control_statuses(criterion: Criterion, controls: Controls, config: Config) -> dict[str, Any]:
    """Run both controls of `criterion` on `config` and judge each by the criterion.

    Returns `{"positive": status, "negative": status, "positive_values": [...],
    "negative_values": [...]}` with each status `met`, `not met` or `undecided`.
    """
    out: dict[str, Any] = {}
    for kind, values in controls.values(config).items():
        out[kind] = status_of(criterion, values)
        out[f"{kind}_values"] = values
    return out

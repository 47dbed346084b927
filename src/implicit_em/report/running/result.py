"""An experiment's result as the report shows it: its outcome, its verdict, where and when it
was measured, its criteria with their controls, its gates and its protocol's registration."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from implicit_em.report.judging.controls import status_of
from implicit_em.report.judging.rule import Judgement
from implicit_em.report.rules.protocol import seed_lists
from implicit_em.report.rules.registration import ProtocolStatus, exploratory_reason
from implicit_em.report.rules.registration import status as protocol_status
from implicit_em.report.running.keys import digest, judgement_record, keyed
from implicit_em.report.running.registry import Experiment, Outcome

__all__ = ["Provenance", "Result"]


@dataclass(frozen=True)
class Provenance:
    """Where a result was measured: the machine line (`implicit_em.machine.summary`) and the
    commit of the source (`provenance.source_commit`)."""

    machine: str
    commit: str


@dataclass
class Result:
    """An experiment's outcome with its verdict, as the report shows it."""

    experiment: Experiment
    size: str
    config: dict[str, Any]
    key: str
    outcome: Outcome | None
    judgement: Judgement
    seconds: float
    provenance: Provenance
    cached: bool = False
    error: str | None = None
    started: str | None = None
    control_values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    units: dict[str, Any] | None = None
    """What its units took (`runner.unit_summary`); None when it ran no timed unit."""
    measurement: dict[str, Any] | None = None
    """Its measurement record (`keys.measurement_record`); None when it did not run."""

    @property
    def meaning(self) -> str:
        return self.experiment.meaning.get(self.judgement.verdict, "")

    @property
    def figure_dir(self) -> str:
        """The folder of the figures, relative to the report's output folder."""
        return f"figures/{self.experiment.id}-{self.key}"

    @property
    def criteria(self) -> list[dict[str, Any]]:
        """Each criterion of the rule with its interval over seeds, its status and its
        known-answer controls' statuses (None where it has none)."""
        if self.outcome is None:
            return []
        try:
            evaluations = self.experiment.rule.evaluate(self.outcome.samples)
        except ValueError:
            return []
        out = []
        for e in evaluations:
            entry = e.as_dict()
            values = self.control_values.get(e.criterion.number)
            entry["controls"] = (
                None
                if values is None
                else {k: status_of(e.criterion, values[k]) for k in ("positive", "negative")}
            )
            controls = self.experiment.controls.get(e.criterion.number)
            entry["control_line"] = controls.line if controls else ""
            out.append(entry)
        return out

    @cached_property
    def registration(self) -> ProtocolStatus:
        """What the registry says of the protocol: hash, registration time, amendments (read
        once per result)."""
        return protocol_status(self.experiment.protocol)

    @property
    def protocol(self) -> dict[str, Any]:
        """The protocol's hash, registration time and amendments."""
        return self.registration.as_dict()

    @property
    def exploratory(self) -> bool:
        """Whether the verdict rests on any change made after its seeds' data were seen."""
        return self.exploratory_reason is not None

    @cached_property
    def exploratory_reason(self) -> str | None:
        """Why the verdict is exploratory: an amendment made after its seeds' data were seen,
        or a change of its measurement or judgement key since they were first seen."""
        seeds = seed_lists(self.config)  # every seed list, E9's top-k arm's included
        if self.registration.exploratory(seeds):
            return "its protocol was amended after data of its seeds were seen"
        if self.measurement is None:
            return None  # nothing was measured
        return exploratory_reason(
            self.experiment.id,
            self.size,
            seeds,
            digest(self.measurement),
            digest(judgement_record(self.experiment.protocol)),
        )

    @property
    def gates(self) -> list[dict[str, Any]]:
        """Each sanity gate with whether it passed and the value it read."""
        if self.outcome is None:
            return []
        return [g.as_dict() for g in self.experiment.rule.gate_results(self.outcome.numbers)]

    def as_dict(self) -> dict[str, Any]:
        e = self.experiment
        outcome = self.outcome
        return {
            "id": e.id,
            "title": e.title,
            "claims": list(e.claims),
            "hypothesis": e.hypothesis,
            "setup": e.setup,
            "rule": e.rule.statement,
            "criteria": self.criteria,
            "gates": self.gates,
            "verdict": self.judgement.verdict,
            "exploratory": self.exploratory,
            "exploratory_reason": self.exploratory_reason,
            "protocol": self.protocol,
            "started": self.started,
            "reason": self.judgement.reason,
            "meaning": self.meaning,
            "headline": {k: outcome.numbers.get(k) for k in e.headline} if outcome else {},
            "numbers": outcome.numbers if outcome else {},
            "samples": outcome.samples if outcome else {},
            "tables": [t.as_dict() for t in outcome.tables] if outcome else [],
            "figures": [
                {"path": f"{self.figure_dir}/{f.path}", "caption": f.caption}
                for f in (outcome.figures if outcome else [])
            ],
            "notes": list(outcome.notes) if outcome else [],
            "size": self.size,
            "seeds": self.config.get("seeds"),
            "config": self.config,
            "key": self.key,
            "measurement": keyed(self.measurement),
            "judgement": keyed(judgement_record(e.protocol)),
            "seconds": self.seconds,
            "units": self.units,
            "machine": self.provenance.machine,
            "commit": self.provenance.commit,
            "cached": self.cached,
            "error": self.error,
        }

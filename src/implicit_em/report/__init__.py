"""The claims report: one experiment per claim, each with a verdict computed from measurements.

`implicit-em report` runs the registered experiments (`REGISTRY`) and writes
`report/index.html`, `report/results.json` and `report/summary.md`. Each
`Experiment` names the claims it tests, states its hypothesis and its `Rule`
before it runs, and measures; the verdict (`holds`, `fails`, `partly`, `not run`) is
computed from the numbers by the rule. Results are cached by configuration, so a killed or
repeated report reruns only what changed.

>>> from implicit_em.report import run_report
>>> report = run_report(["E1"], size="smoke", out="/tmp/iem-report", log=lambda s: None)  # doctest: +SKIP
"""

from __future__ import annotations

from implicit_em.report.build import Report, rebuild, run_report
from implicit_em.report.claims import CLAIMS
from implicit_em.report.registry import (
    REGISTRY,
    SIZES,
    VERDICTS,
    Criterion,
    Experiment,
    Figure,
    Judgement,
    Outcome,
    Rule,
    Table,
    register,
    select,
)
from implicit_em.report.runner import Result, progress

__all__ = [
    "CLAIMS",
    "REGISTRY",
    "SIZES",
    "VERDICTS",
    "Criterion",
    "Experiment",
    "Figure",
    "Judgement",
    "Outcome",
    "Report",
    "Result",
    "Rule",
    "Table",
    "progress",
    "rebuild",
    "register",
    "run_report",
    "select",
]

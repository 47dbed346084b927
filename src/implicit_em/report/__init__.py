"""The claims report: one experiment per claim, each with a verdict computed from measurements.

`implicit-em report` runs the listed experiments (`experiments.MODULES`) and writes
`report/index.html`, `report/results.json` and `report/summary.md`. Each
`Experiment` names the claims it tests, states its hypothesis and its `Rule` (sanity gates
and criteria) before it runs, and measures; the verdict (`holds`, `partly`, `fails`,
`inconclusive`, `invalid`, `not run`) is computed by the rule from the numbers and from 95%
intervals over seeds, and one verdict per claim and objection follows from the criteria by the
item's registered rule (`item_verdicts`; `implicit_em.report.rejudge` reads a results.json
again without running). Each experiment states its work as units (`Unit`: a function and its
plain-JSON arguments), computed in this process or on a Ray cluster; results are cached by
configuration and per-seed units, so a killed or repeated report reruns only what changed.

>>> from implicit_em.report import run_report
>>> report = run_report(["E1"], size="smoke", out="/tmp/iem-report", log=lambda s: None)  # doctest: +SKIP
"""

from __future__ import annotations

from implicit_em.report.build import Report, rebuild, run_report
from implicit_em.report.claims import CLAIMS
from implicit_em.report.item_verdicts import claim_verdicts
from implicit_em.report.judging import VERDICTS, Criterion, Gate, Judgement, Rule
from implicit_em.report.plan import Unit
from implicit_em.report.progress import progress
from implicit_em.report.registry import SIZES, Experiment, Figure, Outcome, Table, select
from implicit_em.report.result import Result

__all__ = [
    "CLAIMS",
    "SIZES",
    "VERDICTS",
    "Criterion",
    "Experiment",
    "Figure",
    "Gate",
    "Judgement",
    "Outcome",
    "Report",
    "Result",
    "Rule",
    "Table",
    "Unit",
    "claim_verdicts",
    "progress",
    "rebuild",
    "run_report",
    "select",
]

"""The claims report: one experiment per claim, each with a verdict computed from measurements.

`implicit-em report` runs the listed experiments (`experiments.MODULES`) and writes
`report/index.html`, `report/results.json` and `report/summary.md`. Each
`Experiment` names the claims it tests, states its hypothesis and its `Rule` (sanity gates
and criteria) before it runs, and measures; the verdict (`holds`, `partly`, `fails`,
`inconclusive`, `invalid`, `not run`) is computed by the rule from the numbers and from 95%
intervals over seeds, and one verdict per claim and objection follows from the criteria by the
item's registered rule (`item_verdicts`; `implicit_em.report.judging.rejudge` reads a results.json
again without running). Each experiment states its work as units (`Unit`: a function and its
plain-JSON arguments), computed in this process or on a Ray cluster; results are cached by
configuration and per-seed units, so a killed or repeated report reruns only what changed.

The package reads as its design:

* `protocols/`: the data. Each experiment's protocol (`<ID>.json`), the registry of their
  registered versions (`registry.json`) and the item rules (`items.json`);
* `rules`: reading that data (`protocol`, `registration`, `claims`); `items`: the item rules;
* `experiments`: the measurements, each a plan of units and an aggregation;
* `running`: plans, executors (local, Ray), the driver, the cache and its keys, progress;
* `judging`: rules over criteria and gates, intervals over seeds, known-answer controls,
  item verdicts, replication, judging a report again;
* `rendering`: the document, page, summary, README table and findings page;
* `publishing`: publishing the full-size run and checking that it still matches its inputs;
* `cli`: the commands.

>>> from implicit_em.report import run_report
>>> report = run_report(["E1"], size="smoke", out="/tmp/iem-report", log=lambda s: None)  # doctest: +SKIP
"""

from __future__ import annotations

from implicit_em.report.judging.item_verdicts import claim_verdicts
from implicit_em.report.judging.rule import VERDICTS, Criterion, Gate, Judgement, Rule
from implicit_em.report.rules.claims import CLAIMS
from implicit_em.report.running.build import Report, rebuild, run_report
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.progress import progress
from implicit_em.report.running.registry import SIZES, Experiment, Figure, Outcome, Table, select
from implicit_em.report.running.result import Result

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

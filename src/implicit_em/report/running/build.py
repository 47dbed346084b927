"""`run_report`: run the selected experiments and write `index.html`, `results.json`,
`summary.md` and `times.json` into the output folder (each written atomically).

A run announces how long it will take from measured times, not budgets: at full size those of
the published full run, at quick size those of `results/quick/times.json`, which is the
`times.json` of a quick report run from a fresh clone, copied there (each experiment's measured
seconds, with the date and machine line of the run). A measured time counts only for the same
work: an experiment whose configuration has changed since (other task sizes, models, budgets
or number of seeds; `work_key`) is announced by its registered budget.

A report below full size is compared with the latest published full-size report,
`results/full/results.json` (when it exists): each verdict that differs is marked. Until one
is published the page says "no full run published". A replication (`--seeds`, see
`report.judging.replication`) is compared at every size: at full size with the published full run, at
quick size with `results/quick/results.json` when one is published there, else the full run.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import implicit_em
from implicit_em.machine import summary as machine_summary
from implicit_em.report.judging.replication import Replication
from implicit_em.report.rendering.page import render_html
from implicit_em.report.rendering.render import render_markdown, report_document
from implicit_em.report.rules.protocol import seed_lists
from implicit_em.report.running.executors import Executor
from implicit_em.report.running.files import write_atomic
from implicit_em.report.running.provenance import tree_state
from implicit_em.report.running.registry import Experiment, select
from implicit_em.report.running.result import Result
from implicit_em.report.running.runner import run_experiments

__all__ = [
    "PUBLISHED_FULL",
    "PUBLISHED_QUICK",
    "QUICK_TIMES",
    "Report",
    "published_seconds",
    "rebuild",
    "run_report",
    "times_document",
    "work_key",
    "write_document",
    "write_report",
]

PUBLISHED_FULL = Path("results/full/results.json")
"""Where the published full-size report lives, relative to the folder the report runs from."""

PUBLISHED_QUICK = Path("results/quick/results.json")
"""Where a published quick-size report would live: what a quick replication compares with."""

QUICK_TIMES = Path("results/quick/times.json")
"""The measured seconds of each experiment at quick size, relative to the same folder."""


@dataclass
class Report:
    """The results of a report run and where its files are."""

    results: list[Result]
    html: Path
    json: Path
    markdown: Path

    @property
    def failed_to_run(self) -> list[str]:
        """Ids of experiments that crashed (their verdict is `not run`)."""
        return [r.experiment.id for r in self.results if r.error is not None]


def run_report(
    ids: Sequence[str] | None = None,
    size: str = "quick",
    out: Path | str = "report",
    device: str = "cpu",
    force: bool = False,
    log: Callable[[str], None] = print,
    published: Path | str | None = PUBLISHED_FULL,
    quick_times: Path | str | None = QUICK_TIMES,
    replication: Replication | None = None,
    executor: Executor | None = None,
) -> Report:
    """Run (or load from the cache) the experiments `ids` (all when None) and write the report;
    `executor` computes their units (None: in this process, `executors.LocalExecutor`).

    `published` is the full-size `results.json` the verdicts are compared with (below full
    size; None or a missing file: "no full run published"); at full size, the times it
    measured are what the run announces; at quick size, those of `quick_times`. A
    `replication` runs every experiment on the seeds it names and marks the report as one.
    """
    out = Path(out)
    # Below full size `write_report` reads the publication for the comparison, once.
    timed = {"full": published, "quick": quick_times}.get(size)
    measured = published_seconds(_published(timed), size, select(ids))
    results = run_experiments(
        select(ids),
        size,
        out,
        device=device,
        log=log,
        force=force,
        measured=measured,
        replication=replication,
        executor=executor,
    )
    if replication and size == "quick" and PUBLISHED_QUICK.is_file():
        published = PUBLISHED_QUICK
    return write_report(results, size, out, device, published, replication)


def published_seconds(
    document: dict | None, size: str, experiments: Sequence[Experiment] | None = None
) -> dict[str, float]:
    """Each experiment's measured seconds in a published report `document`, when it was
    measured at `size` (the announcement of a run then states what was measured); given the
    `experiments` about to run, only where the entry did the same work as each does now (its
    recorded `work_key`, or its configuration's, equals the current configuration's)."""
    if document is None:
        return {}
    current = {e.id: work_key(e.configs[size]) for e in experiments or ()}
    return {
        e["id"]: float(e["seconds"])
        for e in document.get("experiments", [])
        if e.get("size") == size
        and e.get("seconds")
        and (experiments is None or _recorded_work(e) == current.get(e["id"]))
    }


def work_key(config: Mapping[str, Any]) -> str:
    """What an experiment's configuration makes it compute, as a hash: the configuration with
    the device left out and each seed list (`seeds`, `*_seeds`) read as its length, so that the
    same work on other seeds or another device has the same key."""

    def shape(value: Any, key: str = "") -> Any:
        if isinstance(value, list) and (key == "seeds" or key.endswith("_seeds")):
            return len(value)
        if isinstance(value, Mapping):
            return {k: shape(v, k) for k, v in value.items() if k != "device"}
        if isinstance(value, list | tuple):
            return [shape(v) for v in value]
        return value

    blob = json.dumps(shape(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _recorded_work(entry: Mapping[str, Any]) -> str | None:
    if entry.get("work"):
        return entry["work"]
    return work_key(entry["config"]) if entry.get("config") is not None else None


def write_report(
    results: Sequence[Result],
    size: str,
    out: Path,
    device: str = "cpu",
    published: Path | str | None = PUBLISHED_FULL,
    replication: Replication | None = None,
) -> Report:
    """Write the three files of a report of `results` (measured at `size` on `device`) into
    `out`, where their figures are; a `replication` is marked, with its seeds."""
    meta = {
        "size": size,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "version": implicit_em.__version__,
        "machine": machine_summary(device),
        "device": device,
        "seconds": sum(r.seconds for r in results),
        **_tree(),
    }
    if replication is not None:
        measured = [s for r in results for s in seed_lists(r.config)]
        meta["replication"] = replication.as_dict(measured)
    full = _published(published) if size != "full" or replication else None
    document = report_document([r.as_dict() for r in results], meta, full)
    return _write(document, out, list(results))


def _tree() -> dict[str, Any]:
    """The commit the report runs from and whether its checkout is clean."""
    state = tree_state()
    return {"commit": state.commit, "clean": state.clean}


def _published(path: Path | str | None) -> dict | None:
    if path is None or not Path(path).is_file():
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def rebuild(out: Path | str) -> Path:
    """Re-render `index.html` and `summary.md` from `results.json` in `out`."""
    out = Path(out)
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    write_atomic(out / "index.html", render_html(document, out))
    write_atomic(out / "summary.md", render_markdown(document))
    return out / "index.html"


def write_document(document: dict, out: Path, figures: Path | None = None) -> None:
    """Write a report `document` as `results.json`, `summary.md` and `index.html` into `out`;
    the figures it names are read from `figures` (`out` when None)."""
    write_atomic(out / "results.json", json.dumps(document, indent=1, allow_nan=True))
    write_atomic(out / "summary.md", render_markdown(document))
    write_atomic(out / "index.html", render_html(document, out if figures is None else figures))


def times_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """The measured time of each experiment of a report `document`, with the run's size, date
    and machine, and the `work_key` of what it computed: what `results/quick/times.json` holds
    (read by `published_seconds`)."""
    meta = document["meta"]
    return {
        "meta": {k: meta[k] for k in ("size", "date", "machine", "version")},
        "experiments": [
            {"id": e["id"], "size": e["size"], "seconds": e["seconds"], "work": _recorded_work(e)}
            for e in document["experiments"]
        ],
    }


def _write(document: dict, out: Path, results: list[Result]) -> Report:
    write_document(document, out)
    write_atomic(out / "times.json", json.dumps(times_document(document), indent=1))
    return Report(results, out / "index.html", out / "results.json", out / "summary.md")

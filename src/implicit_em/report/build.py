"""`run_report`: run the selected experiments and write `index.html`, `results.json` and
`summary.md` into the output folder (each written atomically)."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import implicit_em
from implicit_em.machine import summary as machine_summary
from implicit_em.report.registry import select
from implicit_em.report.render import render_html, render_markdown, report_document
from implicit_em.report.runner import Result, run_experiments, write_atomic

__all__ = ["Report", "rebuild", "run_report"]


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
) -> Report:
    """Run (or load from the cache) the experiments `ids` (all when None) and write the report."""
    out = Path(out)
    experiments = select(ids)
    results = run_experiments(experiments, size, out, device=device, log=log, force=force)
    meta = {
        "size": size,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "version": implicit_em.__version__,
        "machine": machine_summary(device),
        "device": device,
        "seconds": sum(r.seconds for r in results),
    }
    document = report_document([r.as_dict() for r in results], meta)
    return _write(document, out, results)


def rebuild(out: Path | str) -> Path:
    """Re-render `index.html` and `summary.md` from `results.json` in `out`."""
    out = Path(out)
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    write_atomic(out / "index.html", render_html(document, out))
    write_atomic(out / "summary.md", render_markdown(document))
    return out / "index.html"


def _write(document: dict, out: Path, results: list[Result]) -> Report:
    paths = Report(results, out / "index.html", out / "results.json", out / "summary.md")
    write_atomic(paths.json, json.dumps(document, indent=1, allow_nan=True))
    write_atomic(paths.markdown, render_markdown(document))
    write_atomic(paths.html, render_html(document, out))
    return paths

"""Publishing a finished full-size report into the repository, `results/full/`.

`publish(source)` reads the report that `implicit-em report --full --out SOURCE` wrote and
writes its `results.json`, `summary.md` and self-contained `index.html` into `results/full/`.
It refuses, with one line naming the reason, a report that is not full size, one whose
experiments no longer match the current source, data, libraries or rules
(`freshness.stale_experiments`: measurement- or judgement-stale), one whose protocols were not
registered before its run started (`registration.check_run`), one that is incomplete (an
experiment of the report missing, `not run` or `invalid`) unless `partial` is set, and any
report while the checkout it is published from has uncommitted changes (the publication names
the commit it was published from, which must hold what it describes). A partial publication is
marked as such on the page, in `summary.md` and in every report compared with it. Every
published experiment carries its size, seeds, commit, machine line, measured time, the runner's
cache key and its measurement and judgement keys; the publication carries the package version,
the commit and whether the tree was clean. Publishing records in the protocol registry when each
experiment's full-size data were first seen (`registration.record_data_seen`).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from implicit_em.report.publishing.freshness import published_document, stale_experiments
from implicit_em.report.publishing.superseded import FILE as SUPERSEDED_FILE
from implicit_em.report.rendering.readme import full_size_column
from implicit_em.report.rules.registration import check_run, record_data_seen
from implicit_em.report.running.build import PUBLISHED_FULL, write_document
from implicit_em.report.running.files import write_atomic
from implicit_em.report.running.provenance import CHECKOUT, TreeState, tree_state
from implicit_em.report.running.registry import Experiment, select

__all__ = ["PUBLISHED", "Publication", "gaps", "publish"]

PUBLISHED = PUBLISHED_FULL.parent
"""The folder of the published full-size report, relative to the repository root."""


@dataclass(frozen=True)
class Publication:
    """Where a report was published, and what it lacks (empty when complete)."""

    folder: Path
    gaps: list[str]
    readme: Path | None


def gaps(document: Mapping[str, Any], experiments: Sequence[Experiment]) -> list[str]:
    """What keeps `document` from being a complete run of `experiments`, one phrase each:
    `E10 not in the run`, `E5 not run`, `E7 invalid`."""
    found = {e["id"]: e for e in document["experiments"]}
    missing = [e.id for e in experiments if e.id not in found]
    lacking = [f"{i} not in the run" for i in missing]
    for entry in document["experiments"]:
        if entry.get("error") or entry["verdict"] == "not run":
            lacking.append(f"{entry['id']} not run")
        elif entry["verdict"] == "invalid":
            lacking.append(f"{entry['id']} invalid")
    return lacking


def publish(
    source: Path | str,
    dest: Path | str = PUBLISHED,
    partial: bool = False,
    readme: Path | str | None = None,
    experiments: Sequence[Experiment] | None = None,
    checkout: Path | str | None = None,
) -> Publication:
    """Publish the full-size report in `source` into `dest`.

    Parameters
    ----------
    source : path
        The `--out` folder of a finished `implicit-em report --full` (its `results.json` and
        figures).
    dest : path
        Where to publish (`results/full`).
    partial : bool
        Publish even when experiments are missing, `not run` or `invalid`; the publication is
        then marked as partial, with what it lacks.
    readme : path, optional
        A README whose claim table gets its "full size" column from this publication
        (`readme.full_size_column`).
    experiments : sequence of Experiment, optional
        The report's experiments (the registry when None).
    checkout : path, optional
        The git checkout published from (this package's, `CHECKOUT`, when None); it must be
        clean.

    Raises
    ------
    ValueError
        One line, naming `source`: not a report, not full size, stale, or incomplete without
        `partial`; or naming the checkout when it has uncommitted changes.
    """
    source, dest = Path(source), Path(dest)
    registry = select() if experiments is None else list(experiments)
    document = published_document(source)
    if document is None:
        raise ValueError(f"--from {source}: no results.json there (not a finished report)")
    sizes = sorted(
        {document["meta"].get("size")} | {e.get("size") for e in document["experiments"]}
    )
    if sizes != ["full"]:
        raise ValueError(
            f"--from {source}: a {', '.join(map(str, sizes))} report, not a full-size run"
        )
    stale = stale_experiments(document, registry)
    if stale:
        raise ValueError(
            f"--from {source}: {', '.join(f'{s.id} ({s.kind})' for s in stale)} changed since "
            f"the run ({stale[0].id}: {stale[0].reason}); rerun: {_rerun(stale[0].command)}"
        )
    unregistered = check_run(document["experiments"])
    if unregistered:
        raise ValueError(
            f"--from {source}: not a run of registered protocols ({'; '.join(unregistered)}); "
            "register first (`implicit-em register`), then run on fresh confirmation seeds"
        )
    lacking = gaps(document, registry)
    if lacking and not partial:
        raise ValueError(
            f"--from {source}: not a complete full run ({'; '.join(lacking)}); "
            "--partial publishes it marked as partial"
        )
    checkout = CHECKOUT if checkout is None else Path(checkout)
    tree = tree_state(checkout)
    if not tree.clean:
        shown = ", ".join(tree.changed[:3]) + (" ..." if len(tree.changed) > 3 else "")
        raise ValueError(
            f"publish: the checkout {checkout} is not clean ({shown}); commit first, so that "
            "the publication names the commit that holds what it describes"
        )
    published = _with_provenance(document, lacking, tree)
    readme = None if readme is None else Path(readme)
    text = None if readme is None else _readme_with(readme, published)
    write_document(published, dest, figures=source)
    (dest / SUPERSEDED_FILE).unlink(missing_ok=True)  # a new publication supersedes nothing
    if readme is not None and text is not None:
        write_atomic(readme, text)
    record_data_seen(published["experiments"], "full")
    return Publication(dest, lacking, readme)


def _rerun(command: str) -> str:
    """The command that refreshes a run: a judgement-stale run is rebuilt from its cache."""
    if command.startswith("implicit-em publish --rejudge"):
        return (
            "the same `implicit-em report --full` (cached numbers: its verdicts are judged again)"
        )
    return command


def _readme_with(readme: Path, published: Mapping[str, Any]) -> str:
    """The README's text with its "full size" column from `published` (checked before any
    file is written)."""
    try:
        return full_size_column(readme.read_text(encoding="utf-8"), published)
    except (OSError, ValueError) as err:
        raise ValueError(f"--readme {readme}: {err}") from err


def _with_provenance(
    document: Mapping[str, Any], lacking: list[str], tree: TreeState
) -> dict[str, Any]:
    """The document with each experiment's size, seeds, commit, machine, time and key, and the
    publication's date and gaps.

    A report from before the runner recorded seeds, commit and machine per experiment gets its
    seeds from the configuration, the machine of its run and the commit published from, whose
    source gives the same cache keys (`publish` checked).
    """
    published = json.loads(json.dumps(document))
    meta = published["meta"]
    commit = tree.commit
    for entry in published["experiments"]:
        entry.setdefault("seeds", entry["config"].get("seeds"))
        entry.setdefault("machine", meta["machine"])
        entry.setdefault("commit", commit)
        missing = [
            k
            for k in ("size", "seeds", "commit", "machine", "seconds", "key")
            if entry.get(k) is None
        ]
        if missing:
            raise ValueError(f"{entry['id']}: the report does not record its {', '.join(missing)}")
    meta["publication"] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "partial": bool(lacking),
        "gaps": lacking,
        "version": meta.get("version"),
        "commit": tree.commit,
        "clean": tree.clean,
    }
    return published

"""Running experiments: a cache keyed by configuration, atomic writes, crashes kept as `not run`.

Each experiment's result is cached under `<out>/cache/<ID>-<key>.json`, with `key` a hash of
its id, size, configuration (device included) and the source of its module, and its figures
under `<out>/figures/<ID>-<key>/`. Both appear atomically (written aside, then renamed), so a
report that is killed or run again reruns only what is not cached or has changed. An
experiment's work is a plan of units (`implicit_em.report.running.plan`), computed by an executor (in
this process, or on a Ray cluster: `implicit_em.report.running.executors`); while it runs, the driver
keeps each finished unit under `<out>/units/<ID>-<key>/` (`implicit_em.report.running.units`), so a
killed report resumes at the units in progress, and aggregates the experiment here, where its
figures are written (`drive`). One report at a time holds the output folder (`lock`). The verdict is never cached: it is computed
from the cached numbers and samples by the experiment's rule on every load. A cache entry also
keeps the machine line and the commit it was measured on, so a result read back from the cache
still says where its numbers and its time come from, and its measurement record
(`implicit_em.report.running.keys`): an entry whose library code, data files or library versions
changed since is measured again.

The console says what is resumed (finished experiments read from the cache, an experiment's
kept units), draws the run's progress line only on a terminal (`progress.on_terminal`; plain
lines elsewhere), and shows no tracer alarm raised inside an experiment: the alarms stay
records, which the experiments that are about them read. A Ctrl-C raises `Interrupted`, which
names the experiments kept.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from implicit_em.machine import summary as machine_summary
from implicit_em.report.judging.replication import Replication
from implicit_em.report.judging.rule import Judgement
from implicit_em.report.rules.registration import now as utc_now
from implicit_em.report.running.drive import (
    Interrupted,
    Job,
    LogWarnings,
    announce,
    drive,
    expected_seconds,
    plan_job,
)
from implicit_em.report.running.executors import Executor, LocalExecutor
from implicit_em.report.running.files import as_new_file, json_default, write_atomic, write_json
from implicit_em.report.running.keys import run_measurement, still_measured
from implicit_em.report.running.lock import hold
from implicit_em.report.running.plan import alarms_off_console, warning_lines
from implicit_em.report.running.progress import duration, progress
from implicit_em.report.running.provenance import source_commit
from implicit_em.report.running.registry import SIZES, Experiment, Figure, Outcome, Table
from implicit_em.report.running.result import Provenance, Result
from implicit_em.report.running.units import unit_summary

__all__ = [
    "Interrupted",
    "Result",
    "cache_key",
    "check_output_folder",
    "duration",
    "progress",
    "run_experiments",
    "write_atomic",
]

CACHE_VERSION = 3


def _source(experiment: Experiment) -> str:
    """The source of the experiment's module and of the private helper modules beside it that
    it names (`_*.py` in the same folder), so that a change to either reruns it."""
    module = inspect.getmodule(experiment.aggregate)
    if module is None or module.__file__ is None:
        return inspect.getsource(experiment.aggregate)
    path = Path(module.__file__)
    own = path.read_text(encoding="utf-8")
    helpers = sorted(
        p for p in path.parent.glob("_*.py") if p.name != "__init__.py" and p.stem in own
    )
    return "\n".join([own, *(p.read_text(encoding="utf-8") for p in helpers)])


def cache_key(experiment: Experiment, size: str, config: dict[str, Any]) -> str:
    """Hash of the experiment's id, size, configuration, its controls' configuration and its
    source (its module and helpers)."""
    source = _source(experiment)
    control = experiment.configs["control"]
    blob = json.dumps(
        {
            "v": CACHE_VERSION,
            "id": experiment.id,
            "size": size,
            "config": config,
            "control": control,
            "source": source,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_output_folder(out: Path) -> None:
    """Create `out` if needed and check that it is writable (`ValueError` naming it if not)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as err:
        raise ValueError(f"--out {out}: not a writable folder ({err.strerror or err})") from err


def _load(
    experiment: Experiment, path: Path, size: str, config: dict, key: str, here: Provenance
) -> Result | None:
    """The cached result at `path`, or None; an entry from before the cache kept its machine
    and commit is taken as measured `here` (the same key means the same source)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        outcome = Outcome(
            numbers=data["numbers"],
            samples=data["samples"],
            tables=[Table.from_dict(t) for t in data["tables"]],
            figures=[Figure(**f) for f in data["figures"]],
            notes=list(data["notes"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not still_measured(data.get("measurement"), experiment, config):
        return None  # its code, data or libraries changed since (or it predates the record)
    return Result(
        experiment,
        size,
        config,
        key,
        outcome,
        experiment.judge(outcome),
        float(data.get("seconds", 0.0)),
        Provenance(data.get("machine", here.machine), data.get("commit", here.commit)),
        cached=True,
        started=data.get("started"),
        control_values=data.get("controls", {}),
        units=data.get("units"),
        measurement=data["measurement"],
    )


def run_controls(experiment: Experiment, device: str) -> dict[str, dict[str, list[float]]]:
    """Each criterion's known-answer controls run on the protocol's `control` configuration:
    their per-seed values by criterion number (the statuses are judged on every load)."""
    config = {**experiment.configs["control"], "device": device}
    return {number: controls.values(config) for number, controls in experiment.controls.items()}


def _store(
    path: Path,
    outcome: Outcome,
    seconds: float,
    here: Provenance,
    started: str,
    controls: dict[str, dict[str, list[float]]],
    units: dict[str, Any] | None,
    measurement: dict[str, Any],
) -> None:
    data = {
        "measurement": measurement,
        "units": units,
        "started": started,
        "controls": controls,
        "numbers": outcome.numbers,
        "samples": outcome.samples,
        "tables": [t.as_dict() for t in outcome.tables],
        "figures": [{"path": f.path, "caption": f.caption} for f in outcome.figures],
        "notes": outcome.notes,
        "seconds": seconds,
        "machine": here.machine,
        "commit": here.commit,
    }
    write_json(path, data)


def _not_run(job: Job, size: str, here: Provenance, error: str) -> Result:
    last = error.strip().splitlines()[-1] if error.strip() else "unknown error"
    return Result(
        job.experiment,
        size,
        job.config,
        job.key,
        None,
        Judgement("not run", f"crashed: {last}"),
        job.seconds,
        here,
        error=error,
        started=job.started,
    )


def _finish(job: Job, size: str, out: Path, here: Provenance, log_warnings: LogWarnings) -> Result:
    """Aggregate a job whose units are in (on the driver: its figures are written here),
    run its controls and cache the result; a failure is `not run` and caches nothing."""
    experiment, config, key = job.experiment, job.config, job.key
    final_dir = out / "figures" / f"{experiment.id}-{key}"
    work_dir = Path(tempfile.mkdtemp(dir=out / "figures", prefix=f".{experiment.id}-"))
    start = time.perf_counter()
    try:
        if job.failed is not None:
            raise _UnitFailed(job.failed)
        with alarms_off_console(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            outcome = experiment.aggregate(config, job.values, work_dir)
            controls = run_controls(experiment, config.get("device", "cpu"))
        log_warnings(experiment.id, "aggregate", warning_lines(caught))
        if not isinstance(outcome, Outcome):
            raise TypeError(
                f"{experiment.id}.aggregate returned {type(outcome).__name__}, not an Outcome"
            )
        for figure in outcome.figures:
            if not (work_dir / figure.path).is_file():
                raise FileNotFoundError(f"{experiment.id}: figure {figure.path} was not written")
        # Round-trip through JSON now, so that what is shown is exactly what is cached.
        outcome.numbers = json.loads(json.dumps(outcome.numbers, default=json_default))
        outcome.samples = {k: [float(v) for v in values] for k, values in outcome.samples.items()}
    except KeyboardInterrupt:
        shutil.rmtree(work_dir, ignore_errors=True)  # the finished units stay for a resume
        raise
    except Exception as err:
        shutil.rmtree(work_dir, ignore_errors=True)
        job.seconds += time.perf_counter() - start
        error = err.text if isinstance(err, _UnitFailed) else traceback.format_exc()
        return _not_run(job, size, here, error)
    job.seconds += time.perf_counter() - start
    shutil.rmtree(final_dir, ignore_errors=True)
    as_new_file(work_dir)
    os.replace(work_dir, final_dir)
    timed = unit_summary(job.folder, job.resumed)
    # units may have run in other processes (Ray): the record is the import closure read from
    # the source, which covers what they import
    measurement = run_measurement(experiment, size, config, set())
    cache = out / "cache" / f"{experiment.id}-{key}.json"
    _store(
        cache, outcome, job.seconds, here, job.started or utc_now(), controls, timed, measurement
    )
    shutil.rmtree(job.folder, ignore_errors=True)
    return Result(
        experiment,
        size,
        config,
        key,
        outcome,
        experiment.judge(outcome),
        job.seconds,
        here,
        started=job.started,
        control_values=controls,
        units=timed,
        measurement=measurement,
    )


class _UnitFailed(Exception):
    """A unit of the experiment raised (its traceback is `text`)."""

    def __init__(self, text: str) -> None:
        super().__init__(text.strip().splitlines()[-1] if text.strip() else "unit failed")
        self.text = text


def run_experiments(
    experiments: Sequence[Experiment],
    size: str,
    out: Path,
    device: str = "cpu",
    log: Callable[[str], None] = print,
    force: bool = False,
    measured: Mapping[str, float] | None = None,
    replication: Replication | None = None,
    executor: Executor | None = None,
) -> list[Result]:
    """Run (or load from the cache) each experiment at `size`; crashes become `not run`.

    A `replication` replaces the seeds of every configuration (`report.judging.replication`).

    Before anything runs, `log` announces the expected time of each experiment to run and
    their total: the seconds `measured` for it at this size (by experiment id), else its
    registered `minutes`, marked as a budget. The units are computed by `executor` (in this
    process when None); the values, the cache and the figures are written here. A second
    report on the same `out` is refused (`lock.Locked`). Ctrl-C raises `Interrupted`.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    check_output_folder(out)
    with hold(out):
        (out / "cache").mkdir(exist_ok=True)
        (out / "figures").mkdir(exist_ok=True)
        here = Provenance(machine_summary(device), source_commit())
        jobs = []
        for experiment in experiments:
            config = {**experiment.configs[size], "device": device}
            config = replication.apply(config) if replication else config
            key = cache_key(experiment, size, config)
            cache = out / "cache" / f"{experiment.id}-{key}.json"
            job = Job(experiment, config, key, out / "units" / f"{experiment.id}-{key}")
            job.result = None if force else _load(experiment, cache, size, config, key, here)
            jobs.append(job)
        announce(jobs, size, out, measured or {}, log)
        for job in jobs:
            if job.result is None:
                plan_job(job)
        return drive(
            jobs,
            out,
            executor or LocalExecutor(),
            lambda job, log_warnings: _finish(job, size, out, here, log_warnings),
            log,
            {j.experiment.id: expected_seconds(j.experiment, size, measured or {}) for j in jobs},
        )

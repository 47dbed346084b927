"""Running experiments: a cache keyed by configuration, atomic writes, crashes kept as `not run`.

Each experiment's result is cached under `<out>/cache/<ID>-<key>.json`, with `key` a hash of
its id, size, configuration (device included) and the source of its module, and its figures
under `<out>/figures/<ID>-<key>/`. Both appear atomically (written aside, then renamed), so a
report that is killed or run again reruns only what is not cached or has changed. While an
experiment runs, its units (`implicit_em.report.units`) are kept under `<out>/units/<ID>-<key>/`,
so a killed experiment resumes at the unit it was in. The verdict is never cached: it is computed
from the cached numbers and samples by the experiment's rule on every load. A cache entry also
keeps the machine line and the commit it was measured on, so a result read back from the cache
still says where its numbers and its time come from, and its measurement record
(`implicit_em.report.keys`): an entry whose library code, data files or library versions
changed since is measured again.

The console says what is resumed (finished experiments read from the cache, an experiment's
kept units), draws progress bars only on a terminal (`progress.on_terminal`; one plain line per
experiment elsewhere), and shows no tracer alarm raised inside an experiment: the alarms stay
records, which the experiments that are about them read. A Ctrl-C raises `Interrupted`, which
names the experiments kept.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from implicit_em.machine import summary as machine_summary
from implicit_em.report.files import as_new_file, json_default, write_atomic, write_json
from implicit_em.report.judging import Judgement
from implicit_em.report.keys import run_measurement, still_measured
from implicit_em.report.progress import on_terminal, progress
from implicit_em.report.provenance import source_commit
from implicit_em.report.registration import now as utc_now
from implicit_em.report.registry import SIZES, Experiment, Figure, Outcome, Table
from implicit_em.report.result import Provenance, Result
from implicit_em.report.units import activate, kept_units, unit_times
from implicit_em.trace.alarms import CollapseWarning

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


class Interrupted(Exception):
    """A report stopped by Ctrl-C: the experiments whose results are in the cache (`kept`)
    and the one that was running, whose finished units are kept (`running`, None if none)."""

    def __init__(self, kept: list[str], running: str | None) -> None:
        super().__init__(f"interrupted while running {running}")
        self.kept = kept
        self.running = running


@contextmanager
def alarms_off_console() -> Iterator[None]:
    """Keep the tracer's alarms off the console: no `CollapseWarning`, no log line from the
    `implicit_em.trace` logger. The alarms are still raised and recorded (`Tracer.alarms`)."""
    trace_log = logging.getLogger("implicit_em.trace")
    disabled = trace_log.disabled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollapseWarning)
        trace_log.disabled = True
        try:
            yield
        finally:
            trace_log.disabled = disabled


def _source(experiment: Experiment) -> str:
    """The source of the experiment's module and of the private helper modules beside it that
    it names (`_*.py` in the same folder), so that a change to either reruns it."""
    module = inspect.getmodule(experiment.run)
    if module is None or module.__file__ is None:
        return inspect.getsource(experiment.run)
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


def unit_summary(times: dict[str, float], resumed: int) -> dict[str, Any] | None:
    """What a finished experiment's units took (`units.unit_times`): how many were timed, their
    seconds together (every sitting's work), the longest and its seconds, and how many were read
    back from an earlier sitting (`resumed`). None when it timed no unit."""
    if not times:
        return None
    longest = max(times, key=times.__getitem__)
    return {
        "count": len(times),
        "seconds": sum(times.values()),
        "longest": longest,
        "longest_seconds": times[longest],
        "resumed": resumed,
    }


def _run_one(
    experiment: Experiment, size: str, config: dict, key: str, out: Path, here: Provenance
) -> Result:
    final_dir = out / "figures" / f"{experiment.id}-{key}"
    work_dir = Path(tempfile.mkdtemp(dir=out / "figures", prefix=f".{experiment.id}-"))
    units = out / "units" / f"{experiment.id}-{key}"
    started = utc_now()
    resumed = kept_units(units)
    before = set(sys.modules)
    start = time.perf_counter()
    try:
        with activate(units), alarms_off_console():
            outcome = experiment.run(config, work_dir)
            controls = run_controls(experiment, config.get("device", "cpu"))
        if not isinstance(outcome, Outcome):
            raise TypeError(
                f"{experiment.id}.run returned {type(outcome).__name__}, not an Outcome"
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
        seconds = time.perf_counter() - start
        lines = traceback.format_exception_only(type(err), err)
        error = "".join(lines).strip()
        return Result(
            experiment,
            size,
            config,
            key,
            None,
            Judgement("not run", f"crashed: {error}"),
            seconds,
            here,
            error=traceback.format_exc(),
            started=started,
        )
    seconds = time.perf_counter() - start
    shutil.rmtree(final_dir, ignore_errors=True)
    as_new_file(work_dir)
    os.replace(work_dir, final_dir)
    timed = unit_summary(unit_times(units), resumed)
    measurement = run_measurement(experiment, size, config, set(sys.modules) - before)
    cache = out / "cache" / f"{experiment.id}-{key}.json"
    _store(cache, outcome, seconds, here, started, controls, timed, measurement)
    shutil.rmtree(units, ignore_errors=True)
    return Result(
        experiment,
        size,
        config,
        key,
        outcome,
        experiment.judge(outcome),
        seconds,
        here,
        started=started,
        control_values=controls,
        units=timed,
        measurement=measurement,
    )


def run_experiments(
    experiments: Sequence[Experiment],
    size: str,
    out: Path,
    device: str = "cpu",
    log: Callable[[str], None] = print,
    force: bool = False,
    measured: Mapping[str, float] | None = None,
) -> list[Result]:
    """Run (or load from the cache) each experiment at `size`; crashes become `not run`.

    Before anything runs, `log` announces the expected time of each experiment to run and
    their total: the seconds `measured` for it at this size (by experiment id), else its
    registered `minutes`, marked as a budget. Ctrl-C raises `Interrupted`.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    check_output_folder(out)
    (out / "cache").mkdir(exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    here = Provenance(machine_summary(device), source_commit())
    planned = []
    for experiment in experiments:
        config = {**experiment.configs[size], "device": device}
        key = cache_key(experiment, size, config)
        cached = (
            None
            if force
            else _load(
                experiment, out / "cache" / f"{experiment.id}-{key}.json", size, config, key, here
            )
        )
        planned.append((experiment, config, key, cached))
    to_run = [p for p in planned if p[3] is None]
    _announce(planned, to_run, size, out, measured or {}, log)
    results = []
    bar = tqdm(planned, desc="report", unit="exp", dynamic_ncols=True, disable=not on_terminal())
    say = bar.write if on_terminal() else log
    for experiment, config, key, cached in bar:
        bar.set_postfix_str(experiment.id)
        if cached is None and not on_terminal():
            log(f"{experiment.id:<4} running  {experiment.title}")
        try:
            result = cached or _run_one(experiment, size, config, key, out, here)
        except KeyboardInterrupt:
            bar.close()
            kept = [
                e.id for e, _, k, _ in planned if (out / "cache" / f"{e.id}-{k}.json").is_file()
            ]
            raise Interrupted(kept, None if experiment.id in kept else experiment.id) from None
        state = "cached" if result.cached else f"{result.seconds:.1f} s"
        say(f"{experiment.id:<4} {result.judgement.verdict:<8} ({state})  {experiment.title}")
        results.append(result)
    return results


def _announce(
    planned: Sequence[tuple[Experiment, dict, str, Result | None]],
    to_run: Sequence[tuple[Experiment, dict, str, Result | None]],
    size: str,
    out: Path,
    measured: Mapping[str, float],
    log: Callable[[str], None],
) -> None:
    """Say what runs and for about how long (the measured seconds of each experiment, else
    its registered budget, marked as such), and what is resumed."""

    def expected(experiment: Experiment) -> float:
        return measured.get(experiment.id, experiment.minutes[size] * 60)

    total = sum(expected(p[0]) for p in to_run)
    budgets = [p[0].id for p in to_run if p[0].id not in measured]
    basis = "as measured" if not budgets else f"budgets for {', '.join(budgets)}"
    about = f" (about {duration(total)}: {basis})" if to_run else ""
    log(f"{len(planned)} experiment(s) at size {size!r}, {len(to_run)} to run{about}")
    done = len(planned) - len(to_run)
    if done:
        log(f"resuming: {done} finished experiment(s) read from {out / 'cache'}")
    for experiment, _, key, _ in to_run:
        units = out / "units" / f"{experiment.id}-{key}"
        kept = kept_units(units)
        resumed = f" (resumes from {kept} kept unit(s))" if kept else ""
        source = "" if experiment.id in measured else " (budget)"
        log(
            f"  {experiment.id:<4} about {duration(expected(experiment)):<7}{source} "
            f"{experiment.title}{resumed}"
        )


def duration(seconds: float) -> str:
    """A length of time as a reader says it: `1.6 s`, `40 s`, `12 min`, `2.9 h`."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

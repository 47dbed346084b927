"""Driving a report run: the units of every experiment to run go to an executor, the values
come back here and are kept (`units.store`), and each experiment is finished in report order as
soon as its units are in (`finish`: aggregate, controls, cache). An experiment whose plan or
unit raised is finished as `not run`, saying why on its own line; the other experiments go on.

The console gets, in report order, `E7   running  <title>` (off a terminal) before the run
waits on an experiment, and `E7   holds    (12.3 s)  <title>` when it is finished; the whole
run's progress is one line (`progress.RunProgress`). Warnings raised by units (third-party
libraries' among them) go to `<out>/warnings.log`, not the console. Ctrl-C raises `Interrupted`.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from implicit_em.report.rules.registration import now as utc_now
from implicit_em.report.running.executors import Executor
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.progress import RunProgress, duration, on_terminal
from implicit_em.report.running.registry import Experiment
from implicit_em.report.running.result import Result
from implicit_em.report.running.time_left import Work, seconds_left
from implicit_em.report.running.units import kept_units, read_unit, store

__all__ = ["WARNINGS", "Interrupted", "Job", "announce", "drive", "expected_seconds", "plan_job"]

WARNINGS = "warnings.log"
"""The file in the output folder that the warnings raised by units go to."""

LogWarnings = Callable[[str, str, Sequence[str]], None]


class Interrupted(Exception):
    """A report stopped by Ctrl-C: the experiments whose results are in the cache (`kept`)
    and the one that was running, whose finished units are kept (`running`, None if none)."""

    def __init__(self, kept: list[str], running: str | None) -> None:
        super().__init__(f"interrupted while running {running}")
        self.kept = kept
        self.running = running


@dataclass
class Job:
    """An experiment of the run: cached (`result` set from the start), or its units to
    compute (`pending`), the values in so far and, once finished, its result."""

    experiment: Experiment
    config: dict[str, Any]
    key: str
    folder: Path
    units: list[Unit] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    resumed: int = 0
    seconds: float = 0.0
    failed: str | None = None
    started: str | None = None
    result: Result | None = None

    @property
    def pending(self) -> list[Unit]:
        return [u for u in self.units if u.name not in self.values]

    @property
    def ready(self) -> bool:
        return self.result is not None or self.failed is not None or not self.pending

    def work(self, expected: float) -> Work:
        """Its units still to finish, each expected to take its share of `expected` (the
        experiment's seconds) until one of them has finished in this run."""
        return Work(
            tuple(u.threads for u in self.pending),
            expected / max(1, len(self.units)),
            len(self.values) - self.resumed,
            self.seconds,
        )


def plan_job(job: Job) -> None:
    """Plan the job's units and read back those already kept; a plan that raises fails it."""
    job.started = utc_now()
    try:
        job.units = list(job.experiment.plan(job.config))
    except Exception:
        job.failed = traceback.format_exc()
        return
    names = [u.name for u in job.units]
    if len(set(names)) != len(names):
        job.failed = f"ValueError: {job.experiment.id} plans a unit name twice"
        return
    for name in names:
        found, value = read_unit(job.folder, name)
        if found:
            job.values[name] = value
    job.resumed = len(job.values)


def drive(
    jobs: list[Job],
    out: Path,
    executor: Executor,
    finish: Callable[[Job, LogWarnings], Result],
    log: Callable[[str], None],
    expected: Mapping[str, float],
) -> list[Result]:
    """Compute every pending unit on `executor` and `finish` the experiments in report order
    as their units come in (one whose plan or unit failed as `not run`); the progress line's
    time left reads each experiment's `expected` seconds (by id) until its units are timed."""
    flat = [(job, unit) for job in jobs if job.result is None for unit in job.pending]
    bar = RunProgress(len(flat), executor.workers, log)
    head = [0]
    warned = out / WARNINGS

    def log_warnings(ident: str, name: str, caught: Sequence[str]) -> None:
        lines = list(caught)
        if lines:
            with warned.open("a", encoding="utf-8") as file:
                file.writelines(f"{ident} {name}: {line}\n" for line in lines)

    def left() -> float:
        work = [
            j.work(expected[j.experiment.id]) for j in jobs if j.result is None and j.failed is None
        ]
        return seconds_left(work, executor.workers)

    def running() -> dict[str, tuple[int, int]]:
        busy = [j for j in jobs[head[0] :] if j.result is None and j.units]
        return {j.experiment.id: (len(j.values), len(j.units)) for j in busy[:4]}

    def finish_ready() -> None:
        while head[0] < len(jobs) and jobs[head[0]].ready:
            job = jobs[head[0]]
            cached = job.result is not None
            if not cached:
                job.result = finish(job, log_warnings)
            result = job.result
            assert result is not None
            state = "cached" if cached else f"{result.seconds:.1f} s"
            title = job.experiment.title
            bar.write(f"{job.experiment.id:<4} {result.judgement.verdict:<8} ({state})  {title}")
            if result.judgement.verdict == "not run":
                bar.write(f"{job.experiment.id:<4} why: {result.judgement.reason}")
            head[0] += 1
            _announce_next(jobs, head[0], bar)

    try:
        _announce_next(jobs, 0, bar)
        finish_ready()
        stream = executor.run([u for _, u in flat], lambda i: flat[i][0].failed is not None)
        for index, done in stream:
            job = flat[index][0]
            if done.error is not None:
                job.failed = f"unit {done.name}: {done.error}"
                last = done.error.strip().splitlines()[-1]
                bar.write(f"{job.experiment.id:<4} unit {done.name} failed: {last}")
            else:
                store(job.folder, done)
                job.values[done.name] = done.value
                job.seconds += done.seconds
            log_warnings(job.experiment.id, done.name, done.warnings)
            bar.advance(running(), executor.busy(), left())
            finish_ready()
        finish_ready()
    except KeyboardInterrupt:
        executor.close()
        bar.close()
        kept = [
            j.experiment.id
            for j in jobs
            if (out / "cache" / f"{j.experiment.id}-{j.key}.json").is_file()
        ]
        current = jobs[head[0]].experiment.id if head[0] < len(jobs) else None
        raise Interrupted(kept, None if current in kept else current) from None
    bar.close()
    return [job.result for job in jobs if job.result is not None]


def _announce_next(jobs: Sequence[Job], head: int, bar: RunProgress) -> None:
    """Off a terminal, say which experiment the run now waits on (one plain line)."""
    if head < len(jobs) and jobs[head].result is None and not on_terminal():
        bar.write(f"{jobs[head].experiment.id:<4} running  {jobs[head].experiment.title}")


def announce(
    jobs: Sequence[Job],
    size: str,
    out: Path,
    measured: Mapping[str, float],
    log: Callable[[str], None],
) -> None:
    """Say what runs and for about how long (the measured seconds of each experiment, else
    its registered budget, marked as such), and what is resumed."""
    to_run = [j for j in jobs if j.result is None]
    seconds = {j.experiment.id: expected_seconds(j.experiment, size, measured) for j in to_run}
    total = sum(seconds.values())
    budgets = [j.experiment.id for j in to_run if j.experiment.id not in measured]
    basis = "as measured" if not budgets else f"budgets for {', '.join(budgets)}"
    about = f" (about {duration(total)}: {basis})" if to_run else ""
    log(f"{len(jobs)} experiment(s) at size {size!r}, {len(to_run)} to run{about}")
    done = len(jobs) - len(to_run)
    if done:
        log(f"resuming: {done} finished experiment(s) read from {out / 'cache'}")
    for job in to_run:
        experiment = job.experiment
        kept = kept_units(job.folder)
        resumed = f" (resumes from {kept} kept unit(s))" if kept else ""
        source = "" if experiment.id in measured else " (budget)"
        log(
            f"  {experiment.id:<4} about {duration(seconds[experiment.id]):<7}{source} "
            f"{experiment.title}{resumed}"
        )


def expected_seconds(experiment: Experiment, size: str, measured: Mapping[str, float]) -> float:
    """How long `experiment` is expected to take at `size`: the seconds `measured` for it, else
    its registered budget (`minutes`)."""
    return measured.get(experiment.id, experiment.minutes[size] * 60)

"""The time a report run has left: each unit at its own experiment's measured pace (its budget
before any is timed), spread over the workers, never less than the longest unit left."""

from __future__ import annotations

import heapq

import pytest

from implicit_em.report import select
from implicit_em.report.running.drive import Job
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.time_left import Work, seconds_left

PLANTED = [("A", 1800.0)] * 4 + [("B", 10.0)] * 40 + [("C", 300.0)] * 6
"""A run's units in report order with the wall seconds each takes: a few long units first,
then many short ones (a run read at the pace of its first units would expect hours)."""


def _finishing_times(units: list[tuple[str, float]], workers: int) -> list[tuple[float, int]]:
    """When each unit finishes, taken in order by the first free worker: (time, index)."""
    free = [0.0] * workers
    ends = []
    for index, (_, seconds) in enumerate(units):
        start = heapq.heappop(free)
        heapq.heappush(free, start + seconds)
        ends.append((start + seconds, index))
    return sorted(ends)


def _work(units: list[tuple[str, float]], done: set[int], budget: dict[str, float]) -> list[Work]:
    work = []
    for experiment, per_unit in budget.items():
        mine = [i for i, (e, _) in enumerate(units) if e == experiment]
        finished = [i for i in mine if i in done]
        work.append(
            Work(
                tuple(1 for i in mine if i not in done),
                per_unit,
                len(finished),
                sum(units[i][1] for i in finished),
            )
        )
    return work


def test_a_planted_run_s_time_left_is_read_at_each_experiment_s_own_pace():
    workers = 2
    ends = _finishing_times(PLANTED, workers)
    end = ends[-1][0]
    budget = {"A": 600.0, "B": 10.0, "C": 300.0}  # A's is wrong: its first timed unit replaces it
    done: set[int] = set()
    for when, index in ends[:-1]:
        done.add(index)
        left = seconds_left(_work(PLANTED, done, budget), workers)
        truly = end - when
        assert truly <= left <= truly + 1800  # a unit in flight counts whole
        if len(done) == 4:  # the long units done: the pace so far would say over 11 hours
            assert when / len(done) * (len(PLANTED) - len(done)) > 30 * truly
    assert seconds_left(_work(PLANTED, {i for _, i in ends}, budget), workers) == 0.0


def test_before_a_unit_is_timed_its_experiment_s_budget_is_shared_among_its_units():
    assert seconds_left([Work((1,) * 10, budget=30.0)], workers=2) == pytest.approx(150.0)
    timed = Work((1,) * 6, budget=30.0, finished=4, seconds=4 * 600.0)
    assert timed.per_unit == 600.0
    assert seconds_left([timed], workers=2) == pytest.approx(1800.0)


def test_the_workers_and_the_units_threads_share_the_work_left():
    assert seconds_left([Work((1,) * 8, 10.0)], workers=4) == pytest.approx(20.0)
    assert seconds_left([Work((2, 2), 100.0)], workers=2) == pytest.approx(200.0)  # one at a time
    assert seconds_left([Work((8,), 100.0)], workers=2) == pytest.approx(100.0)  # at most all
    assert seconds_left([Work((1,), 3600.0)], workers=16) == 3600.0  # the longest unit left
    assert seconds_left([Work((), 10.0)], workers=2) == 0.0


def test_a_job_s_work_is_its_units_still_to_finish_at_its_pace_in_this_run(tmp_path):
    (e1,) = select(["E1"])
    units = [Unit(name, "math:sqrt", {"x": 1.0}, threads=t) for name, t in (("a", 1), ("b", 2))]
    job = Job(e1, {}, "key", tmp_path, units=[*units, Unit("c", "math:sqrt", threads=3)])
    assert job.work(90.0) == Work((1, 2, 3), 30.0)
    job.values |= {"a": 1.0, "b": 1.0}
    job.resumed = 1  # "a" was read back from an earlier run: it was not timed in this one
    job.seconds = 12.0
    assert job.work(90.0) == Work((3,), 30.0, finished=1, seconds=12.0)
    assert job.work(90.0).per_unit == 12.0

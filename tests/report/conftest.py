"""Fixtures of the claims-report tests: each experiment run once per session at smoke size."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from implicit_em.report import Outcome
from implicit_em.report.running.registry import Experiment

SmokeRun = Callable[[Experiment], tuple[Outcome, Path]]


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """`smoke_run(experiment)`: its outcome at smoke size on the CPU and the folder holding its
    figures, computed on the first call of the session and kept (an error is kept and raised
    again), so the tests that read a smoke run share one."""
    done: dict[str, tuple[Outcome, Path] | BaseException] = {}

    def run(experiment: Experiment) -> tuple[Outcome, Path]:
        if experiment.id not in done:
            out = tmp_path_factory.mktemp(f"smoke-{experiment.id}")
            try:
                config = {**experiment.configs["smoke"], "device": "cpu"}
                done[experiment.id] = (experiment.run(config, out), out)
            except Exception as err:  # kept: every test that reads it fails the same way
                done[experiment.id] = err
        found = done[experiment.id]
        if isinstance(found, BaseException):
            raise found
        return found

    return run

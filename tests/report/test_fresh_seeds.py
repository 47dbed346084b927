"""The full size's seeds are fresh against every run the repository holds: no earlier
confirmatory run, replication or archived run, and no wind-tunnel development run, used any of
them. A run of the current protocol itself (its seeds exactly the full size's, as the
publication of the run these seeds are for) is that run, not an earlier one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from implicit_em.report import select
from implicit_em.report.experiments._windtunnel import DEVELOPMENT_SEEDS
from implicit_em.report.rules.protocol import seed_lists

ROOT = Path(__file__).resolve().parents[2]
RUNS = sorted((ROOT / "results").glob("**/results.json"))


def _seeds_by_experiment(path: Path) -> dict[str, list[int]]:
    """Every seed list each experiment of the run at `path` was configured with, in order."""
    document = json.loads(path.read_text())
    return {
        experiment["id"]: seed_lists(experiment["config"])
        for experiment in document["experiments"]
        if experiment.get("config")
    }


def test_the_repository_holds_earlier_runs() -> None:
    assert len(RUNS) >= 4, RUNS  # the published run, the archive and the quick runs


@pytest.mark.parametrize("experiment", select(None), ids=lambda e: e.id)
def test_full_seeds_are_outside_every_earlier_run(experiment) -> None:
    full_lists = seed_lists(experiment.configs["full"])
    full = set(full_lists)
    for path in RUNS:
        runs = _seeds_by_experiment(path)
        if runs.get(experiment.id) == full_lists:
            continue  # this protocol's own run
        used = full & {seed for seeds in runs.values() for seed in seeds}
        assert not used, f"{experiment.id}: seeds {sorted(used)} were used by {path}"
    assert not full & set(DEVELOPMENT_SEEDS)

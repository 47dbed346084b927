"""Every listed experiment runs at smoke size and measures every number and sample its rule reads."""

from __future__ import annotations

import json

import pytest

from implicit_em.report import Outcome, select
from implicit_em.report.rules.protocol import seed_lists


@pytest.mark.parametrize("experiment", select(None), ids=lambda e: e.id)
def test_smoke_run_measures_what_the_rule_reads(experiment, smoke_run):
    outcome, tmp_path = smoke_run(experiment)  # shared with the judging invariants
    assert isinstance(outcome, Outcome)
    for gate in experiment.rule.gates:
        assert isinstance(outcome.numbers.get(gate.number), (int, float)), gate.number
    for criterion in experiment.rule.criteria:
        assert criterion.sample_lists(outcome.samples), f"{criterion.number} not measured"
    for name in experiment.headline:
        assert name in outcome.numbers
    assert outcome.figures, "every experiment draws at least one figure"
    for figure in outcome.figures:
        assert (tmp_path / figure.path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(outcome.numbers)  # serializable as the cache needs
    json.dumps(outcome.samples)
    assert experiment.judge(outcome).verdict not in ("not run", "invalid")


@pytest.mark.parametrize("experiment", select(None), ids=lambda e: e.id)
def test_seed_counts(experiment):
    """Quick: at least 5 seeds (3 for E13's wind tunnel, 2 for E10-E12's, whose quick size
    cannot converge on the reference tasks, 3 for E20's, whose Clopper-Pearson shares cannot
    be decided at quick size with 5 runs either, 5/5 reading [0.48, 1.00]); full: at least 10
    (5 for E13)."""
    wind_tunnel = "scale" in experiment.configs["quick"]
    if experiment.id in ("E10", "E11", "E12"):
        quick, full = 2, 10
    elif experiment.id == "E20":
        quick, full = 3, 20
    else:
        quick, full = (3, 5) if wind_tunnel else (5, 10)
    assert len(experiment.configs["quick"]["seeds"]) >= quick
    assert len(experiment.configs["full"]["seeds"]) >= full


def test_preconditioned_path_is_em_at_smoke_size(smoke_run):
    """E2's headline fact is exact at any size: preconditioned steps are EM's to rounding."""
    (experiment,) = select(["E2"])
    outcome, _ = smoke_run(experiment)
    assert outcome.numbers["preconditioned_max_deviation"] <= 1e-10
    residuals = experiment.rule.criteria[0].sample_lists(outcome.samples)
    assert set(residuals) == {"synthetic", "wine"}  # one list per data set, never pooled
    assert min(min(v) for v in residuals.values()) > 0.05


@pytest.mark.parametrize("experiment", select(None), ids=lambda e: e.id)
def test_full_seeds_are_fresh_against_every_other_size(experiment):
    """No full-size seed, nested lists included (every `seeds` list that `--seeds` and
    `--seed-offset` move), is one of the smoke, quick or control seeds
    or one of those shifted by 6000 (the committed quick replication's)."""
    full = set(seed_lists(experiment.configs["full"]))
    assert full, f"{experiment.id}: no full-size seeds"
    others = set()
    for size in ("smoke", "quick", "control"):
        seeds = seed_lists(experiment.configs[size])
        others |= set(seeds) | {s + 6000 for s in seeds}
    assert not full & others, f"{experiment.id}: full seeds {sorted(full & others)} used elsewhere"

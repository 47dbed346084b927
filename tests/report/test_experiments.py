"""Every registered experiment runs at smoke size and measures every number its rule reads."""

from __future__ import annotations

import json

import pytest

from implicit_em.report import REGISTRY, Outcome, select


@pytest.mark.parametrize("experiment_id", [e.id for e in select(None)])
def test_smoke_run_measures_what_the_rule_reads(experiment_id, tmp_path):
    experiment = REGISTRY[experiment_id]
    outcome = experiment.run({**experiment.configs["smoke"], "device": "cpu"}, tmp_path)
    assert isinstance(outcome, Outcome)
    for criterion in experiment.rule.criteria:
        assert criterion.value(outcome.numbers) is not None, f"{criterion.number} not measured"
    for name in experiment.headline:
        assert name in outcome.numbers
    assert outcome.figures, "every experiment draws at least one figure"
    for figure in outcome.figures:
        assert (tmp_path / figure.path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(outcome.numbers)  # serializable as the cache needs
    assert experiment.judge(outcome).verdict in ("holds", "partly", "fails")


def test_preconditioned_path_is_em_at_smoke_size(tmp_path):
    """E2's headline fact is exact at any size: preconditioned steps are EM's to rounding."""
    experiment = REGISTRY["E2"]
    outcome = experiment.run({**experiment.configs["smoke"], "device": "cpu"}, tmp_path)
    assert outcome.numbers["preconditioned_max_deviation"] <= 1e-10
    assert outcome.numbers["gd_best_median_residual"] > 0.05

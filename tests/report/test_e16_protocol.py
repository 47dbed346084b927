"""E16's registered protocol and its controls: the gains are the criteria, each with the model
without the clamp as its realistic negative control and the clean-label gate as its baseline;
the GD-EM agreement is a gate; the aggregation computes the numbers those name."""

from __future__ import annotations

import json
from pathlib import Path

from implicit_em.report.experiments import e16_partial_clamps as e16
from implicit_em.report.experiments._imperfect_labels import ARMS

PROTOCOL = json.loads(
    (Path(e16.__file__).parents[1] / "protocols" / "E16.json").read_text(encoding="utf-8")
)


def test_every_gain_has_a_realistic_negative_control_and_the_clean_gate():
    criteria = {c["number"]: c for c in PROTOCOL["criteria"]}
    assert set(criteria) == {f"gain_{arm}" for arm in ARMS} == set(e16.EXPERIMENT.controls)
    for c in criteria.values():
        assert c["negative_control"]["kind"] == "realistic"
        assert [g["number"] for g in c["baseline"]["gates"]] == ["clean_margin"]
    assert [g["number"] for g in PROTOCOL["gates"]] == ["em_agreement"]
    assert [c["number"] for c in criteria.values() if c["primary"]] == ["gain_noisy_sym"]


def _run(agreement: float, gain: float) -> dict:
    return {
        "ours": 0.7,
        "em": 0.7,
        "agreement": agreement,
        "overlap": agreement - 0.02,
        "rivals": {"a": 0.7 - gain, "b": 0.6},
        "best_rival": "a",
        "gain": gain,
    }


def test_aggregate_reads_the_gates_and_gains_from_the_units(tmp_path):
    config = {"seeds": [0, 1]}
    results = {"clean": {"ours": 0.80, "lda": 0.76, "logistic": 0.81}}
    for i, arm in enumerate(ARMS):
        for seed in config["seeds"]:
            results[f"{arm}-seed{seed}"] = _run(0.9 + 0.01 * i, 0.01 * seed - 0.02)
    outcome = e16.aggregate(config, results, tmp_path)
    numbers = outcome.numbers
    assert abs(numbers["clean_margin"] - (-0.01)) < 1e-12
    assert abs(numbers["em_agreement"] - 0.92) < 1e-12
    assert abs(numbers["em_overlap"] - 0.90) < 1e-12
    assert outcome.samples == {f"gain_{arm}": [-0.02, -0.01] for arm in ARMS}

"""E16's registered protocol and its controls: the gains on the judged arms are the criteria,
each with the model without the clamp as its realistic negative control and, as its baseline,
the clean-label gate and every rival's own-task gate; the GD-EM agreement is a gate; the
aggregation computes the numbers those name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from implicit_em.report.experiments import e16_partial_clamps as e16
from implicit_em.report.experiments._imperfect_labels import (
    ARMS,
    JUDGED,
    WORKS,
    field_methods,
    works_key,
)

PROTOCOL = json.loads(
    (Path(e16.__file__).parents[1] / "protocols" / "E16.json").read_text(encoding="utf-8")
)


def test_every_gain_has_a_realistic_negative_control_and_its_rivals_gates():
    criteria = {c["number"]: c for c in PROTOCOL["criteria"]}
    assert set(criteria) == {f"gain_{arm}" for arm in JUDGED} == set(e16.EXPERIMENT.controls)
    for arm in JUDGED:
        c = criteria[f"gain_{arm}"]
        assert c["negative_control"]["kind"] == "realistic"
        gates = [g["number"] for g in c["baseline"]["gates"]]
        expected = ["clean_margin"] + [works_key(arm, rival) for rival, _ in WORKS[arm]]
        assert gates == expected + (["rivals_converged"] if arm == "crowd" else [])
    assert [g["number"] for g in PROTOCOL["gates"]] == ["em_agreement"]
    assert [c["number"] for c in criteria.values() if c["primary"]] == ["gain_noisy_sym"]


def test_the_best_rival_is_chosen_among_the_field_s_methods_never_the_naive_ones():
    assert field_methods("partial") == ["PRODEN"]
    assert field_methods("noisy_sym") == ["GCE", "cleanlab CleanLearning"]
    assert field_methods("crowd") == ["Dawid-Skene", "GLAD"]  # majority vote is the naive one
    assert field_methods("semi") == ["pseudo-labelling", "label spreading"]


def test_the_controls_run_at_quick_size_and_the_full_seeds_are_fresh():
    # the controls read the quick run's rivals (fitted once: `e16.rival_readings`)
    sizes = PROTOCOL["sizes"]
    assert sizes["control"] == sizes["quick"]
    assert {k: v for k, v in sizes["smoke"].items() if k != "seeds"} == {
        k: v for k, v in sizes["quick"].items() if k != "seeds"
    }
    assert min(sizes["full"]["seeds"]) >= 2100


def _run(arm: str, agreement: float, gain: float) -> dict:
    return {
        "ours": 0.7,
        "em": 0.7,
        "agreement": agreement,
        "overlap": agreement - 0.02,
        "rivals": {"a": 0.7 - gain, "b": 0.6},
        "best_rival": "a",
        "gain": gain,
        "works": {works_key(arm, rival): 0.03 for rival, _ in WORKS[arm]},
        "rivals_converged": arm != "crowd" or gain < -0.015,
    }


def test_aggregate_reads_the_gates_and_gains_from_the_units(tmp_path):
    config = {"seeds": [0, 1]}
    results = {"clean": {"ours": 0.80, "lda": 0.76, "logistic": 0.81}}
    for i, arm in enumerate(ARMS):
        for seed in config["seeds"]:
            results[f"{arm}-seed{seed}"] = _run(arm, 0.9 + 0.01 * i, 0.01 * seed - 0.02)
    outcome = e16.aggregate(config, results, tmp_path)
    numbers = outcome.numbers
    assert numbers["clean_margin"] == pytest.approx(-0.01)
    assert numbers["em_agreement"] == pytest.approx(0.925)  # mean over the six arms
    assert numbers["em_overlap"] == pytest.approx(0.905)
    assert numbers["rivals_converged"] == pytest.approx(0.5)  # one crowd seed of two
    assert numbers[works_key("crowd", "GLAD")] == pytest.approx(0.03)
    assert outcome.samples == {f"gain_{arm}": [-0.02, -0.01] for arm in ARMS}


def test_the_units_run_on_one_thread_and_give_the_threads_back():
    import torch

    before = torch.get_num_threads()
    with e16._one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before

"""E9's top-k part: the sequence task, the transformer's routing, the arms and the readings."""

from __future__ import annotations

import pytest
import torch

from implicit_em.report.experiments._moe_events import cluster_task
from implicit_em.report.experiments._topk_part import specialized_flags, topk_readings, topk_units
from implicit_em.report.experiments._topk_transformer import (
    MoETransformer,
    sequence_task,
    topk_run,
)

CONFIG = {
    "dim": 8,
    "clusters": 4,
    "classes": 3,
    "experts": 4,
    "hidden": 8,
    "top_k": 2,
    "task_seed": 7,
    "length": 4,
    "width": 16,
    "heads": 2,
    "layers": 1,
    "n_train": 32,
    "n_test": 16,
    "batch": 8,
    "steps": 12,
    "every": 5,
    "lr": 0.01,
    "balance": 1.0,
    "planted_bias": 10.0,
    "arms": ["trained", "frozen"],
    "seeds": [0, 1],
}


def test_sequence_task_is_the_cluster_task_cut_into_sequences():
    x, y, c = sequence_task(CONFIG, 5, 3)
    assert x.shape == (5, 4, 8) and y.shape == c.shape == (5, 4)
    flat_x, flat_y, flat_c = cluster_task(CONFIG, 20, 3)
    assert torch.equal(x.reshape(20, 8), flat_x)
    assert torch.equal(y.flatten(), flat_y) and torch.equal(c.flatten(), flat_c)


def test_transformer_routes_every_token_to_k_experts():
    torch.manual_seed(0)
    model = MoETransformer({**CONFIG, "layers": 2})
    x, _, _ = sequence_task(CONFIG, 3, 0)
    logits, probs, index = model(x)
    assert logits.shape == (3, 4, 3)
    assert len(probs) == len(index) == 2
    assert probs[0].shape == (12, 4) and index[0].shape == (12, 2)
    assert torch.allclose(probs[0].sum(-1), torch.ones(12))
    assert torch.equal(index[0], probs[0].topk(2, dim=-1).indices)


def test_trained_router_reads_as_responsibilities():
    """The tracer finds the router and its gradients equal its softmax's Jacobian product."""
    r = topk_run(CONFIG, 0, "trained")
    assert "router" in r["site_types"] and r["router_residual"] < 1e-4
    assert 0 < r["purity"] <= 1 and 0 < r["matched_purity"] <= r["purity"] + 1e-9
    assert 0 <= r["accuracy"] <= 1


def test_frozen_router_gets_no_gradient():
    """The frozen arm's routing is out of the objective's reach: no router site, no update."""
    r = topk_run(CONFIG, 0, "frozen")
    assert "router" not in r["site_types"] and r["router_residual"] == float("inf")


def test_planted_routing_follows_the_clusters():
    r = topk_run({**CONFIG, "planted_bias": 100.0}, 0, "planted")
    assert r["purity"] == 1.0 and r["matched_purity"] == 1.0


def test_unknown_arm_is_refused():
    with pytest.raises(ValueError, match="arm"):
        topk_run(CONFIG, 0, "hash")


def test_specialized_flags_at_point_nine():
    runs = [{"purity": 0.95}, {"purity": 0.9}, {"purity": 0.89}]
    assert specialized_flags(runs) == [1.0, 1.0, 0.0]


def test_readings_count_the_trained_seeds():
    config = {"topk": CONFIG}
    assert [u.name for u in topk_units(config)] == [
        "topk-trained-seed0",
        "topk-trained-seed1",
        "topk-frozen-seed0",
        "topk-frozen-seed1",
    ]
    run = {"matched_purity": 0.5, "accuracy": 0.7, "min_share": 0.5, "router_residual": 0.0}
    results = {
        "topk-trained-seed0": {**run, "purity": 0.95},
        "topk-trained-seed1": {**run, "purity": 0.80, "router_residual": 2e-7},
        "topk-frozen-seed0": {**run, "purity": 0.6, "router_residual": float("inf")},
        "topk-frozen-seed1": {**run, "purity": 0.7, "router_residual": float("inf")},
    }
    numbers, samples, table, note = topk_readings(config, results)
    assert samples == {"specialized_topk": [1.0, 0.0]}
    assert numbers["specialized_seed_share_topk_trained"] == 0.5
    assert numbers["specialized_seed_share_topk_frozen"] == 0.0
    assert numbers["router_residual_topk"] == 2e-7
    assert numbers["purity_topk_frozen"] == pytest.approx(0.65)
    assert len(table.rows) == 2 and "1 of 2 seeds" in note

"""Drift to the final state from weight snapshots, and the settling step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from implicit_em.windtunnel.timescales import (
    attention_maps,
    drift_to_final,
    remaining_distance,
    settling_step,
    value_weights,
)
from implicit_em.windtunnel.train import SNAPSHOTS, RunConfig, build_model, held_out, run

TINY = RunConfig(
    task="bijection",
    task_params={"n_symbols": 4, "n_pairs": 3},
    n_layer=2,
    n_head=2,
    n_embd=16,
    steps=12,
    batch_size=8,
    warmup=2,
    eval_every=6,
    ckpt_every=6,
    n_test=16,
)


def test_settling_step_is_where_the_drift_stays_below() -> None:
    steps = [0, 10, 20, 30, 40]
    assert settling_step(steps, [0.9, 0.01, 0.2, 0.03, 0.0], 0.05) == 30
    assert settling_step(steps, [0.01, 0.01, 0.01, 0.01, 0.0], 0.05) == 0
    assert settling_step(steps, [0.9, 0.9, 0.9, 0.9, 0.0], 0.05) == 40
    with pytest.raises(ValueError):
        settling_step([0, 1], [0.1])


@pytest.mark.parametrize("split_qkv", [False, True])
def test_drift_is_zero_at_the_end_and_matches_a_direct_computation(
    tmp_path: Path, split_qkv: bool
) -> None:
    config = replace(TINY, split_qkv=split_qkv)
    run(config, tmp_path, progress=False, snapshot_every=4)
    snaps = torch.load(tmp_path / SNAPSHOTS, weights_only=True)
    probe = held_out(config).tokens[:8]
    drift = drift_to_final(config, snaps, probe)
    assert drift.steps == [0, 4, 8, 12]
    assert drift.attention[-1] == 0.0 and drift.value[-1] == 0.0
    assert drift.attention[0] > 0 and drift.value[0] > 0
    # The first snapshot by hand: TV of each attention row, and the relative Frobenius distance.
    model = build_model(replace(config, sdpa=False), config.make_task())
    model.load_state_dict(snaps["states"][-1])
    final = attention_maps(model, probe)
    model.load_state_dict(snaps["states"][0])
    first = attention_maps(model, probe)
    tv = torch.stack(
        [0.5 * (a - b).abs().sum(-1).mean() for a, b in zip(first, final, strict=True)]
    ).mean()
    assert drift.attention[0] == pytest.approx(float(tv))
    w0, w1 = value_weights(snaps["states"][0]), value_weights(snaps["states"][-1])
    assert w0.shape == (config.n_layer * config.n_embd, config.n_embd)
    assert drift.value[0] == pytest.approx(float((w0 - w1).norm() / w1.norm()))
    assert all(0 <= a <= 1 for a in drift.attention)


def test_drift_needs_a_transformer_and_two_snapshots() -> None:
    with pytest.raises(ValueError, match="transformer"):
        drift_to_final(replace(TINY, model="mlp-pos"), {"steps": [0, 1], "states": [{}, {}]}, None)
    with pytest.raises(ValueError, match="two snapshots"):
        drift_to_final(TINY, {"steps": [0], "states": [{}]}, None)


def test_remaining_distance_runs_from_one_to_zero_for_every_part(tmp_path: Path) -> None:
    config = replace(TINY, split_qkv=True)
    run(config, tmp_path, progress=False, snapshot_every=4)
    snaps = torch.load(tmp_path / SNAPSHOTS, weights_only=True)
    remaining = remaining_distance(snaps)
    assert set(remaining) == {"routing", "values", "rest"}
    for series in remaining.values():
        assert series[0] == pytest.approx(1.0) and series[-1] == 0.0 and len(series) == 4
    # By hand for the routing: the query and key weights and biases of every layer.
    names = [n for n in snaps["states"][0] if ".attn.query." in n or ".attn.key." in n]
    mid, first, last = (
        torch.cat([snaps["states"][i][n].double().flatten() for n in sorted(names)])
        for i in (1, 0, -1)
    )
    expected = float((mid - last).norm() / (first - last).norm())
    assert remaining["routing"][1] == pytest.approx(expected)


def test_remaining_distance_needs_split_attention(tmp_path: Path) -> None:
    run(TINY, tmp_path, progress=False, snapshot_every=6)
    with pytest.raises(ValueError, match="split"):
        remaining_distance(torch.load(tmp_path / SNAPSHOTS, weights_only=True))

"""The schedule, the parameter groups, the decay decoupled from the value multiplier, freezing."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.optim import learning_rate, make_optimizer, set_learning_rates

SPLIT = RunConfig(
    task="bijection",
    task_params={"n_symbols": 4},
    n_layer=1,
    n_head=2,
    n_embd=8,
    split_qkv=True,
    steps=100,
    warmup=10,
    lr=1e-2,
    weight_decay=0.1,
)


def test_cosine_warms_up_then_decays_to_the_floor() -> None:
    c = replace(SPLIT, min_lr_ratio=0.1)
    lrs = [learning_rate(c, s) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[9] == pytest.approx(1e-2)
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:]))
    assert learning_rate(c, 100) == pytest.approx(1e-3)


def test_constant_schedule_holds_the_peak_after_warmup() -> None:
    c = replace(SPLIT, schedule="constant")
    assert learning_rate(c, 0) == pytest.approx(1e-3)
    assert {learning_rate(c, s) for s in range(10, 200)} == {1e-2}


def test_wsd_holds_the_peak_then_decays_linearly_to_zero() -> None:
    c = replace(SPLIT, schedule="wsd", decay_fraction=0.2)
    assert c.decay_start == 80
    assert {learning_rate(c, s) for s in range(10, 80)} == {1e-2}
    assert learning_rate(c, 90) == pytest.approx(5e-3)
    assert learning_rate(c, 99) == pytest.approx(5e-4) and learning_rate(c, 100) == 0.0
    assert replace(SPLIT, schedule="cosine").decay_start == 100  # the cap: no decay phase
    with pytest.raises(ValueError, match="decay_fraction"):
        replace(c, decay_fraction=1.0)
    stopped = replace(c, stop_at_plateau=True)  # its plateau at step 40 starts the decay
    assert stopped.decay_end(40) == 50 and stopped.decay_end(80) == 100
    assert learning_rate(stopped, 39, 40) == 1e-2 and learning_rate(stopped, 45, 40) == 5e-3
    assert learning_rate(stopped, 50, 40) == 0.0


def test_value_multiplier_speeds_the_step_but_not_the_decay() -> None:
    config = replace(SPLIT, value_lr_mult=10.0)
    model = build_model(config, config.make_task())
    optimizer = make_optimizer(model, config)
    set_learning_rates(optimizer, config, 50)
    groups = {g["part"]: g for g in optimizer.param_groups}
    assert groups["values"]["lr"] == pytest.approx(10 * groups["rest"]["lr"])
    decay = {part: g["lr"] * g["weight_decay"] for part, g in groups.items()}
    assert decay["values"] == pytest.approx(decay["rest"]) == pytest.approx(decay["routing"])
    # One step with zero gradients moves each weight by its decay alone: the same fraction.
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    after = {n: p.detach() for n, p in model.named_parameters()}
    shrink = {n: float((after[n] / before[n])[before[n] != 0].mean()) for n in before}
    values = [v for n, v in shrink.items() if ".attn.value.weight" in n]
    others = [v for n, v in shrink.items() if n.endswith("mlp.0.weight") or "query.weight" in n]
    assert values and others
    assert values[0] == pytest.approx(others[0], rel=1e-6)


def test_a_frozen_part_gets_no_rate_from_its_step_on() -> None:
    for freeze, frozen in (("routing", {"routing"}), ("rest", {"values", "rest"})):
        config = replace(SPLIT, freeze=freeze, freeze_at=30)
        optimizer = make_optimizer(build_model(config, config.make_task()), config)
        set_learning_rates(optimizer, config, 29)
        assert all(g["lr"] > 0 for g in optimizer.param_groups)
        set_learning_rates(optimizer, config, 30)
        assert {g["part"] for g in optimizer.param_groups if g["lr"] == 0} == frozen


def test_models_without_split_attention_have_one_group() -> None:
    config = replace(SPLIT, split_qkv=False)
    optimizer = make_optimizer(build_model(config, config.make_task()), config)
    assert [g["part"] for g in optimizer.param_groups] == ["all"]

"""E10-E12: their rules on realistic numbers on both sides, and what their smoke runs report."""

from __future__ import annotations

import math

import pytest

from implicit_em.report import REGISTRY, select

select(None)  # registers every experiment

FLOOR = 1.1073


def _e10(transformer: float, prefix: float, pos: float) -> dict[str, float]:
    return {
        "transformer_over_floor": transformer / FLOOR,
        "mlp_pos_over_transformer": pos / transformer,
        "mlp_prefix_over_transformer": prefix / transformer,
    }


@pytest.mark.parametrize(
    ("numbers", "verdict"),
    [
        (_e10(0.007, 1.85, 1.107), "holds"),  # the published picture with a failing prefix MLP
        (_e10(0.054, 0.11, 1.107), "partly"),  # the prefix MLP reads the context and gets close
        (_e10(0.054, 0.6, 1.107), "holds"),
        (_e10(0.1, 0.25, 1.107), "partly"),  # the prefix MLP within 3x of the transformer
        (_e10(0.2, 0.25, 1.107), "fails"),  # the transformer misses Bayes and nobody is 10x behind
        (_e10(0.5, 0.6, 1.107), "fails"),
    ],
)
def test_e10_rule(numbers: dict[str, float], verdict: str) -> None:
    assert REGISTRY["E10"].rule.judge(numbers).verdict == verdict


@pytest.mark.parametrize(
    ("ce", "sigmoid", "verdict"),
    [
        (0.054, 0.06, "fails"),  # sigmoids reproduce the posterior: normalization not necessary
        (0.054, 0.5, "holds"),
        (0.01, 0.05, "partly"),  # 5x worse but still within 10% of the floor
    ],
)
def test_e11_rule(ce: float, sigmoid: float, verdict: str) -> None:
    numbers = {
        "transformer_sigmoid_over_floor": sigmoid / FLOOR,
        "transformer_sigmoid_over_ce": sigmoid / ce,
    }
    assert REGISTRY["E11"].rule.judge(numbers).verdict == verdict


@pytest.mark.parametrize(
    ("t_alpha", "t_v", "verdict"), [(300, 1400, "holds"), (1200, 1400, "fails")]
)
def test_e12_rule(t_alpha: int, t_v: int, verdict: str) -> None:
    assert REGISTRY["E12"].rule.judge({"t_alpha_over_t_v": t_alpha / t_v}).verdict == verdict


def test_e10_position_wise_mlp_sits_at_its_floor_and_numbers_agree(tmp_path) -> None:
    experiment = REGISTRY["E10"]
    outcome = experiment.run({**experiment.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    # V = 4, L = 3: log2 4 - mean(log2 4, log2 3, log2 2)
    expected = 2.0 - (2.0 + math.log2(3) + 1.0) / 3
    assert n["context_free_floor_bits"] == pytest.approx(expected, abs=1e-12)
    assert n["mlp_pos_floor_gap"] == pytest.approx(
        abs(n["mlp_pos_bits_mae"] - n["context_free_floor_bits"])
    )
    assert n["mlp_pos_over_transformer"] == pytest.approx(
        n["mlp_pos_bits_mae"] / n["transformer_bits_mae"]
    )
    assert (tmp_path / "runs").is_dir()  # smoke runs stay inside the experiment's folder
    (table,) = outcome.tables
    assert [row[0] for row in table.rows] == ["transformer", "prefix MLP", "position-wise MLP"]


def test_e12_reports_settling_steps_and_both_learning_rates(tmp_path) -> None:
    experiment = REGISTRY["E12"]
    config = {**experiment.configs["smoke"], "device": "cpu"}
    outcome = experiment.run(config, tmp_path)
    n = outcome.numbers
    steps = n["steps"]
    assert 0 <= n["t_alpha"] <= steps and 0 <= n["t_v"] <= steps
    assert (
        len(n["steps_to_kl_single_lr"]) == len(n["steps_to_kl_values_10x"]) == len(config["seeds"])
    )
    assert n["final_kl_single_lr"] != n["final_kl_values_10x"]  # the two schedules differ
    assert any(k.startswith("tracer_") for k in n)  # the tracer ran on the transformer

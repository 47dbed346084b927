"""E10-E12: their rules on realistic numbers on both sides, and what their smoke runs report."""

from __future__ import annotations

import math

import pytest

from implicit_em.report import select

E10, E11, E12 = select(["E10", "E11", "E12"])
FLOOR = 1.1073
SPREAD = (0.97, 1.0, 1.03)  # three seeds a few percent apart


def _seeds(value: float) -> list[float]:
    return [value * f for f in SPREAD]


def _e10(transformer: float, prefix: float) -> dict[str, list[float]]:
    return {
        "transformer_over_floor": _seeds(transformer / FLOOR),
        "mlp_prefix_over_transformer": _seeds(prefix / transformer),
    }


@pytest.mark.parametrize(
    ("samples", "verdict"),
    [
        (_e10(0.007, 1.85), "holds"),  # the published picture with a failing prefix MLP
        (_e10(0.054, 0.11), "partly"),  # the prefix MLP reads the context and gets close
        (_e10(0.054, 0.6), "holds"),
        (_e10(0.2, 0.25), "fails"),  # the transformer misses Bayes and nobody is 10x behind
        (_e10(0.108, 0.25), "inconclusive"),  # the transformer on its threshold
    ],
)
def test_e10_rule(samples: dict[str, list[float]], verdict: str) -> None:
    assert E10.rule.judge({"mlp_pos_floor_relative_gap": 0.0}, samples).verdict == verdict
    # the position-wise MLP off its analytic floor is a bug in the run, not a finding
    assert E10.rule.judge({"mlp_pos_floor_relative_gap": 0.5}, samples).verdict == "invalid"


@pytest.mark.parametrize(
    ("ce", "sigmoid", "verdict"),
    [
        (0.054, 0.06, "fails"),  # sigmoids reproduce the posterior: normalization not necessary
        (0.054, 0.5, "holds"),
        (0.01, 0.05, "partly"),  # 5x worse but still within 10% of the floor
    ],
)
def test_e11_rule(ce: float, sigmoid: float, verdict: str) -> None:
    samples = {
        "transformer_sigmoid_over_floor": _seeds(sigmoid / FLOOR),
        "transformer_sigmoid_over_ce": _seeds(sigmoid / ce),
    }
    assert E11.rule.judge({}, samples).verdict == verdict


@pytest.mark.parametrize(
    ("t_alpha", "t_v", "verdict"), [(300, 1400, "holds"), (1200, 1400, "fails")]
)
def test_e12_rule(t_alpha: int, t_v: int, verdict: str) -> None:
    samples = {"t_alpha_over_t_v": _seeds(t_alpha / t_v)}
    assert E12.rule.judge({}, samples).verdict == verdict


def test_e10_position_wise_mlp_sits_at_its_floor_and_numbers_agree(tmp_path) -> None:
    experiment = E10
    outcome = experiment.run({**experiment.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    # V = 4, L = 3: log2 4 - mean(log2 4, log2 3, log2 2)
    expected = 2.0 - (2.0 + math.log2(3) + 1.0) / 3
    assert n["context_free_floor_bits"] == pytest.approx(expected, abs=1e-12)
    assert n["mlp_pos_floor_gap"] == pytest.approx(
        abs(n["mlp_pos_bits_mae"] - n["context_free_floor_bits"])
    )
    assert n["mlp_pos_floor_relative_gap"] == pytest.approx(
        n["mlp_pos_floor_gap"] / n["context_free_floor_bits"]
    )
    assert len(outcome.samples["transformer_over_floor"]) == len(
        experiment.configs["smoke"]["seeds"]
    )
    assert n["mlp_pos_over_transformer"] == pytest.approx(
        n["mlp_pos_bits_mae"] / n["transformer_bits_mae"]
    )
    assert (tmp_path / "runs").is_dir()  # smoke runs stay inside the experiment's folder
    (table,) = outcome.tables
    assert [row[0] for row in table.rows] == ["transformer", "prefix MLP", "position-wise MLP"]


def test_e12_reports_settling_steps_and_both_learning_rates(tmp_path) -> None:
    experiment = E12
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

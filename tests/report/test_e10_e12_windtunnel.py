"""E10-E12: their rules on realistic per-seed numbers on both sides, and what their smoke runs report."""

from __future__ import annotations

import math

import pytest

from implicit_em.report import select
from implicit_em.report.experiments import _windtunnel as wt

E10, E11, E12 = select(["E10", "E11", "E12"])
SPREAD = (0.97, 1.0, 1.03)  # three seeds a few percent apart
E10_GATES = {
    "unconverged_runs": 0.0,
    "bijection_floor_identity_gap": 0.0,
    "bijection_pos_floor_gap": 0.001,
}


def _seeds(value: float) -> list[float]:
    return [value * f for f in SPREAD]


def _e10(transformer: float, prefix: float, floor: float = 1.1073) -> dict[str, list[float]]:
    """The same KLs (bits) on every task."""
    samples = {}
    for task in wt.TASKS:
        samples[f"{task}_transformer_over_floor"] = _seeds(transformer / floor)
        samples[f"{task}_prefix_over_transformer"] = _seeds(prefix / transformer)
        samples[f"{task}_prefix_over_floor"] = _seeds(prefix / floor)
    return samples


@pytest.mark.parametrize(
    ("samples", "verdict"),
    [
        (_e10(0.001, 0.05), "holds"),  # Bayes reached; prefix MLP 50x behind yet 95% of the way
        (_e10(0.0104, 0.08), "partly"),  # transformer 1% of the floor, prefix MLP 8x behind it
        (_e10(0.2, 0.25), "fails"),  # nobody near Bayes, nobody 10x behind
        (_e10(0.0554, 0.2), "inconclusive"),  # the transformer on its 5% line: partly or fails
    ],
)
def test_e10_rule(samples: dict[str, list[float]], verdict: str) -> None:
    assert E10.rule.judge(E10_GATES, samples).verdict == verdict
    # An unconverged run is a failed gate, not a data point.
    assert E10.rule.judge({**E10_GATES, "unconverged_runs": 1.0}, samples).verdict == "invalid"
    off_floor = {**E10_GATES, "bijection_pos_floor_gap": 0.3}
    assert E10.rule.judge(off_floor, samples).verdict == "invalid"


@pytest.mark.parametrize(
    ("sigmoid", "brier", "verdict"),
    [
        (1.28, 1.5, "holds"),  # reference-cpu seed 0: sigmoids 1.28x CE's KL
        (1.28, 6.0, "partly"),
        (5.0, 6.0, "fails"),  # normalization makes the difference
    ],
)
def test_e11_rule(sigmoid: float, brier: float, verdict: str) -> None:
    samples = {"sigmoid_over_ce": _seeds(sigmoid), "brier_over_ce": _seeds(brier)}
    gates = {"unconverged_runs": 0.0, "ce_over_floor_max": 0.01}
    assert E11.rule.judge(gates, samples).verdict == verdict
    assert E11.rule.judge({**gates, "ce_over_floor_max": 0.9}, samples).verdict == "invalid"


@pytest.mark.parametrize(
    ("routing", "rest", "t90_ratio", "verdict"),
    [
        (0.95, 0.40, 0.3, "holds"),  # routing can be frozen early, the rest cannot
        (0.60, 0.65, 0.95, "fails"),  # no part settles first
        (0.95, 0.40, 0.95, "partly"),
    ],
)
def test_e12_rule(routing: float, rest: float, t90_ratio: float, verdict: str) -> None:
    samples = {
        "routing_minus_rest_mid": _seeds(routing - rest),
        "t90_routing_over_values": _seeds(t90_ratio),
    }
    gates = {"unconverged_runs": 0.0, "kl_gain_min": 0.9}
    assert E12.rule.judge(gates, samples).verdict == verdict
    assert E12.rule.judge({**gates, "kl_gain_min": 0.1}, samples).verdict == "invalid"


def test_e10_smoke_reports_every_task_and_the_analytic_floor(tmp_path) -> None:
    config = {**E10.configs["smoke"], "device": "cpu"}
    outcome = E10.run(config, tmp_path)
    n = outcome.numbers
    # V = 4, L = 3: the uniform prediction's KL is log2 4 - mean(log2 4, log2 3, log2 2).
    expected = 2.0 - (2.0 + math.log2(3) + 1.0) / 3
    assert n["bijection_floor_bits"] == pytest.approx(expected, abs=1e-12)
    assert n["bijection_floor_identity_gap"] < 1e-12
    for task in wt.TASKS:
        over = outcome.samples[f"{task}_transformer_over_floor"]
        assert len(over) == len(config["seeds"])
        assert over[0] == pytest.approx(n[f"{task}_transformer_kl_bits"] / n[f"{task}_floor_bits"])
    assert 0 <= n["unconverged_runs"] <= 9
    assert (tmp_path / "runs").is_dir()  # smoke runs stay inside the experiment's folder
    (table,) = outcome.tables
    assert [row[:2] for row in table.rows[:3]] == [
        ("bijection", "transformer"),
        ("bijection", "prefix MLP"),
        ("bijection", "position-wise MLP"),
    ]
    assert len(table.rows) == 9


def test_e11_smoke_reports_both_unnormalized_objectives(tmp_path) -> None:
    outcome = E11.run({**E11.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    for objective in ("sigmoid", "brier"):
        (ratio,) = outcome.samples[f"{objective}_over_ce"]
        assert ratio == pytest.approx(
            n[f"transformer_{objective}_kl_bits"] / n["transformer_ce_kl_bits"]
        )
        assert n[f"{objective}_sigma_sum_gap"] >= 0


def test_e12_smoke_reports_interventions_in_shares_of_the_kl_gain(tmp_path) -> None:
    config = {**E12.configs["smoke"], "device": "cpu"}
    outcome = E12.run(config, tmp_path)
    n = outcome.numbers
    assert 0 <= n["t90_routing"] <= n["steps"] and 0 <= n["t90_values"] <= n["steps"]
    (difference,) = outcome.samples["routing_minus_rest_mid"]
    intervention, _ = outcome.tables
    (row,) = intervention.rows
    assert row[0] == config["e12"]["freeze_at"][0]
    routing, rest = (float(cell.split()[0]) for cell in row[1:3])
    assert difference == pytest.approx(routing - rest, abs=1e-3)
    assert n["final_kl_single_lr"] != n["final_kl_values_10x"]  # the two schedules differ


def _judged_run(kl: list[float], floor: float = 1.0, recorded: bool = False) -> dict:
    """A run's result as `summary` reads it: evaluations every 100 steps up to 1,000."""
    steps = [100 * (i + 1) for i in range(len(kl))]
    before = [k for s, k in zip(steps, kl, strict=True) if 600 < s <= 800]
    last = [k for s, k in zip(steps, kl, strict=True) if s > 800]
    mb, ml = sum(before) / len(before), sum(last) / len(last)
    return {
        "converged": recorded,
        "uniform_kl_bits": floor,
        "history": {"eval_step": steps, "eval_kl": kl},
        "plateau": {
            "tol": 0.02,
            "atol": 0.005 * floor,
            "window": 0.2,
            "judged_at": steps[-1],
            "relative_improvement": (mb - ml) / mb,
        },
    }


@pytest.mark.parametrize(
    ("last_two_windows", "converged"),
    [
        ((0.100, 0.100, 0.092, 0.092), True),  # fell 0.8% of the floor: within 1%
        ((0.100, 0.100, 0.085, 0.085), False),  # fell 1.5% of the floor, 15% relative
        ((0.0010, 0.0010, 0.00099, 0.00099), True),  # fell 1% relative
    ],
)
def test_the_gate_reads_the_fall_at_one_percent_of_the_floor(last_two_windows, converged):
    kl = [0.5, 0.4, 0.3, 0.2, 0.15, 0.12, *last_two_windows]
    judged = wt.convergence(_judged_run(kl))
    assert judged["converged"] is converged
    assert judged["converged_run"] is False
    assert judged["plateau_fall_floor"] == pytest.approx(kl[6] - kl[8])
    assert wt.converged_text([judged]) == (
        f"{int(converged)}/1 (0/1 at 0.5%; ≤ {100 * (kl[6] - kl[8]):.2g}%)"
    )


def test_budget_prefers_a_task_s_own_steps():
    part = {"steps": {"mlp-pos": 600, "bijection/mlp-prefix": 16000}}
    assert wt.budget(part, "mlp-prefix", "bijection") == {"steps": 16000}
    assert wt.budget(part, "mlp-prefix", "hmm") == {}
    assert wt.budget(part, "mlp-pos", "hmm") == {"steps": 600}

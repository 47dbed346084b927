"""E10-E12: what their smoke runs report, the shared KL measurement, and their protocols' budget
rule (the same tasks at every size, one cap per task)."""

from __future__ import annotations

import math

import pytest
import torch

from implicit_em.report import select
from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.experiments.e11_windtunnel_sigmoid import OBJECTIVES
from implicit_em.windtunnel.config import preset
from implicit_em.windtunnel.evaluation import held_out, plateau, plateau_tolerance

E10, E11, E12 = select(["E10", "E11", "E12"])


CADENCE = ("n_test", "warmup", "eval_every", "ckpt_every")
"""What a smaller budget may shrink besides the caps: the held-out set and the warmup,
evaluation and checkpoint intervals."""


@pytest.mark.parametrize("experiment", [E10, E11, E12], ids=lambda e: e.id)
def test_quick_is_a_smaller_copy_of_full(experiment) -> None:
    quick, full = experiment.configs["quick"], experiment.configs["full"]
    assert quick["tasks"] == full["tasks"] and quick["scale"] == full["scale"]
    same = {k: v for k, v in quick["train"].items() if k not in CADENCE}
    assert same == {k: v for k, v in full["train"].items() if k not in CADENCE}
    for key in CADENCE:
        assert quick["train"][key] <= full["train"][key]
    for task in wt.TASKS:
        assert quick["budget"][task]["steps"] <= full["budget"][task]["steps"]
        assert quick["budget"][task]["min_steps"] == full["budget"][task]["min_steps"]
    assert len(quick["seeds"]) >= 2 and len(full["seeds"]) >= 10


@pytest.mark.parametrize("experiment", [E10, E11, E12], ids=lambda e: e.id)
def test_full_runs_the_reference_tasks_on_fresh_seeds(experiment) -> None:
    full, quick = experiment.configs["full"], experiment.configs["quick"]
    for task in ("bijection", "hmm"):
        # the 10-seed size spells the HMM without the reference's [OBS] markers (E10's
        # reference-budget arms carry them)
        reference = preset(task, "reference").task_params
        assert full["tasks"][task] == {k: v for k, v in reference.items() if k != "markers"}
    assert full["tasks"]["dice"] == {"n_faces": 6, "length": 64}
    development = set(wt.DEVELOPMENT_SEEDS)
    for size in experiment.configs.values():
        assert not development & set(size["seeds"])
    assert not set(full["seeds"]) & set(quick["seeds"])
    assert not set(full["seeds"]) & set(range(1010))  # every earlier size's seeds


def test_one_budget_and_one_rule_for_every_model_and_objective_of_a_task() -> None:
    config = E10.configs["full"]
    runs = [
        wt.task_config(config, "bijection", model=m, objective=o)
        for m in ("transformer", "mlp-prefix", "mlp-pos")
        for o in OBJECTIVES
    ]
    rules = {
        (
            r.steps,
            r.min_steps,
            r.schedule,
            r.min_lr_ratio,
            r.stop_at_plateau,
            r.plateau_tol,
            r.plateau_floor_tol,
        )
        for r in runs
    }
    # fixed length, cosine to zero, the gate read at the end only: flat within 0.05% of the floor
    assert rules == {(10000, 10000, "cosine", 0.0, False, 0.0, 0.0005)}
    budget = config["budget"]["bijection"]
    assert E11.configs["full"]["budget"]["bijection"] == budget
    for experiment in (E10, E11):
        for size in experiment.configs.values():
            assert size["train"]["plateau_floor_tol"] <= 0.0005
            assert size["train"]["plateau_tol"] == 0.0 and not size["train"]["stop_at_plateau"]


def test_a_short_run_fails_the_convergence_gate(tmp_path) -> None:
    """200 steps under the full size's rule, with its own tolerance: the held-out KL still
    falls by far more than 0.05% of the floor in the last window, so the run is not converged
    (the old tolerance, 1% of the floor, let every run stop at its first check)."""
    from implicit_em.windtunnel.train import run

    short = {"steps": 200, "min_steps": 200, "warmup": 20, "eval_every": 20, "n_test": 128}
    config = wt.task_config(E10.configs["full"], "bijection", seed=70, **short)
    result = run(config, tmp_path, progress=False)
    assert result["steps"] == 200 and result["converged"] is False
    assert wt.plateau_fall_floor(result) > config.plateau_floor_tol


def test_a_flat_curve_passes_the_gate_and_a_falling_one_does_not() -> None:
    """The gate on planted curves: 50 evaluations, a KL that has settled within 0.01% of the
    floor over the last 40% of the steps passes; the same curve still falling by 0.1% of the
    floor per window fails."""
    rule = preset("bijection", "reference-budget")
    floor = 1.107
    atol = plateau_tolerance(rule, floor)
    assert atol == pytest.approx(0.0005 * floor)
    steps = list(range(2000, 100_001, 2000))
    settled = [0.01 + (0.5 if s < 50_000 else 1e-4 * floor * (s % 4000 == 0)) for s in steps]
    found = plateau(steps, settled, rule.plateau_window, rule.plateau_tol, atol=atol)
    assert found.converged and abs(found.fall) < atol
    falling = [0.05 - 0.001 * floor * s / 20_000 for s in steps]
    found = plateau(steps, falling, rule.plateau_window, rule.plateau_tol, atol=atol)
    assert not found.converged and found.fall > atol


def test_a_planted_posterior_reads_as_bayes_under_every_objective() -> None:
    run = wt.task_config(E10.configs["control"], "hmm")
    for objective in OBJECTIVES:
        exact = wt.planted_kl(
            wt.task_config(E10.configs["control"], "hmm", objective=objective), 0.0
        )
        assert exact["kl_bits"] < 1e-9
    blurred = wt.planted_kl(run, 0.5)["kl_bits"]
    assert 0 < blurred < wt.untrained_kl(run)["kl_bits"] + 1.0
    model = wt.PlantedPosterior(held_out(run), "ce")
    with pytest.raises(ValueError, match="only the rows of its own batch"):
        model(torch.zeros_like(held_out(run).tokens[:2]) - 1)


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
    assert 0 <= n["prefix_parameter_mismatch"] <= 0.1
    for task in wt.TASKS:
        (excess,) = outcome.samples[f"{task}_prefix_minus_transformer_bits"]
        kl = (n[f"{task}_mlp_prefix_kl_bits"], n[f"{task}_transformer_kl_bits"])
        assert excess == pytest.approx(kl[0] - kl[1])
        assert n[f"{task}_mlp_pos_entropy_mae_bits"] >= 0
    # smoke runs live in each unit's temporary folder, removed with it, not among the figures
    assert not (tmp_path / "runs").exists()
    table, arms = outcome.tables
    assert [row[:2] for row in table.rows[:3]] == [
        ("bijection", "transformer"),
        ("bijection", "prefix MLP"),
        ("bijection", "position-wise MLP"),
    ]
    assert len(table.rows) == 9
    # the reference-budget arms: one row each; at smoke size far below the reference's budget
    block = config["reference_budget"]
    assert [row[0] for row in arms.rows] == list(block["arms"])
    for task in ("bijection", "hmm"):
        assert n[f"refbudget_{task}_budget_share"] < 0.01
        (mae,) = outcome.samples[f"refbudget_{task}_transformer_entropy_mae_bits"]
        arm = "bijection_2x64" if task == "bijection" else "hmm_4x128"
        assert mae == pytest.approx(n[f"refbudget_{arm}_entropy_mae_bits"])
        (excess,) = outcome.samples[f"refbudget_{task}_prefix_minus_transformer_bits"]
        prefix = n[f"refbudget_{task}_prefix_kl_bits"]
        assert excess == pytest.approx(prefix - n[f"refbudget_{arm}_kl_bits"])


def test_e11_smoke_reports_the_four_cells(tmp_path) -> None:
    outcome = E11.run({**E11.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    (excess,) = outcome.samples["brier_minus_softmax_brier_bits"]
    assert excess == pytest.approx(
        n["transformer_brier_kl_bits"] - n["transformer_softmax_brier_kl_bits"]
    )
    (excess,) = outcome.samples["sigmoid_minus_ce_bits"]
    assert excess == pytest.approx(n["transformer_sigmoid_kl_bits"] - n["transformer_ce_kl_bits"])
    assert all(n[f"transformer_{o}_entropy_mae_bits"] >= 0 for o in ("ce", "sigmoid", "brier"))
    assert n["sigmoid_sigma_sum_gap"] >= 0 and n["brier_sigma_sum_gap"] >= 0
    (table,) = outcome.tables
    assert [row[:2] for row in table.rows] == [
        ("softmax", "log-loss"),
        ("softmax", "Brier"),
        ("independent sigmoids", "log-loss"),
        ("independent sigmoids", "Brier"),
    ]


def _judged_run(kl: list[float], floor: float = 1.0) -> dict:
    """A run's result as `summary` reads it: evaluations every 100 steps up to 1,000."""
    steps = [100 * (i + 1) for i in range(len(kl))]
    return {
        "uniform_kl_bits": floor,
        "history": {"eval_step": steps, "eval_kl": kl},
        "plateau": {"tol": 0.02, "atol": 0.01 * floor, "window": 0.2, "judged_at": steps[-1]},
    }


def test_the_reference_budget_arms_are_the_reference_s_budget_at_full_size() -> None:
    from implicit_em.report.experiments import _reference_budget as rb

    full = E10.configs["full"]
    block = full["reference_budget"]
    assert len(block["seeds"]) >= 3 and not set(block["seeds"]) & set(full["seeds"])
    assert not set(block["seeds"]) & (set(wt.DEVELOPMENT_SEEDS) | set(range(70, 80)))
    bijection = rb.arm_config(full, "bijection-2x64", 9190)
    assert (bijection.n_layer, bijection.n_embd, bijection.steps, bijection.batch_size) == (
        2,
        64,
        100_000,
        128,
    )
    assert (bijection.lr, bijection.warmup, bijection.schedule, bijection.min_lr_ratio) == (
        3e-4,
        2000,
        "cosine",
        0.0,
    )
    hmm = rb.arm_config(full, "hmm-4x128", 9190)
    assert hmm.task_params["markers"] and hmm.make_task().seq_len == 93
    for arm in block["arms"]:
        run = rb.arm_config(full, arm, 9190)
        assert run.plateau_floor_tol <= 0.0005 and run.plateau_tol == 0.0
        assert not run.stop_at_plateau
    for task in rb.JUDGED:
        assert min(rb.budget_share(full, a) for a in rb.JUDGED[task]) >= 1
    wide = rb.arm_config(full, "bijection-4x128", 9190)
    assert (wide.n_layer, wide.n_embd, wide.steps) == (4, 128, 21_000)
    units = rb.plan(full)
    assert len(units) == len(block["arms"]) * len(block["seeds"])


def test_the_fall_is_read_over_the_rule_s_own_windows() -> None:
    kl = [0.5, 0.4, 0.3, 0.2, 0.15, 0.12, 0.100, 0.100, 0.092, 0.092]
    assert wt.plateau_fall_floor(_judged_run(kl)) == pytest.approx(kl[6] - kl[8])
    assert wt.plateau_fall_floor(_judged_run(kl, floor=2.0)) == pytest.approx((kl[6] - kl[8]) / 2)
    summaries = [{"converged": True, "plateau_fall_floor": 0.008}, {"converged": False}]
    assert wt.converged_text(summaries) == "1/2 (≤ 0.8%)"


def test_the_prefix_mlp_is_matched_and_the_mismatch_is_the_largest() -> None:
    from implicit_em.report.experiments.e10_windtunnel_bayes import parameter_mismatch

    def unit(transformer: int, prefix: int) -> dict:
        return {
            "transformer": {"n_parameters": transformer},
            "mlp-prefix": {"n_parameters": prefix},
        }

    units = {"bijection": {0: unit(100, 105)}, "hmm": {0: unit(100, 88), 1: unit(100, 100)}}
    assert parameter_mismatch(units) == pytest.approx(0.12)


def test_one_parser_reads_a_control_s_slot_inputs_for_its_measure_and_its_words() -> None:
    from implicit_em.report.experiments.e10_windtunnel_bayes import (
        BLUR,
        FINE_BLUR,
        Blurred,
        Trained,
        slot_input,
    )

    assert slot_input("bayes") == Blurred(BLUR)
    assert slot_input("bayes-fine") == Blurred(FINE_BLUR)
    assert slot_input("trained:mlp-pos") == Trained("mlp-pos", 0)
    assert slot_input("trained:mlp-prefix+1000") == Trained("mlp-prefix", 1000)
    assert slot_input("bayes-fine").says() == "the posterior blurred by 0.01%"
    assert slot_input("trained:mlp-prefix+1000").says() == (
        "the trained prefix MLP from a second initialization"
    )
    for unknown in ("bayes-coarse", "mlp-pos", "trained:lstm"):
        with pytest.raises(ValueError, match="unknown control input"):
            slot_input(unknown)
    says = E10.controls["bijection_prefix_minus_transformer_bits"].negative.says
    assert says == (
        "bijection: transformer slot: the trained prefix MLP from a second initialization, "
        "prefix MLP slot: the trained prefix MLP, position-wise MLP slot: the posterior blurred "
        "by 1%"
    )


@pytest.mark.parametrize("experiment", [E10, E11, E12], ids=lambda e: e.id)
def test_units_that_train_on_the_device_ask_for_a_gpu_when_it_is_one(experiment) -> None:
    """The Ray executor gives a unit a GPU only when it declares one: every unit that trains on
    the size's device does on `cuda`, none does on the CPU; E12's one-head arms train on the
    CPU whatever the device."""
    on_device = {"E10": {"bijection", "hmm", "dice", "ref"}, "E11": {"objectives"}}
    trains_there = on_device.get(experiment.id, {"interventions"})
    for device, gpu in (("cpu", False), ("cuda", True)):
        units = experiment.plan({**experiment.configs["full"], "device": device})
        kinds = {u.name.split("-")[0] for u in units}
        assert trains_there <= kinds
        assert {u.name: u.gpu for u in units} == {
            u.name: gpu and u.name.split("-")[0] in trains_there for u in units
        }

"""E8: open-set metrics against a direct computation, the null-component identity, the rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em.report import select
from implicit_em.report.experiments import _open_set
from implicit_em.report.experiments import e8_open_set as e8

(E8,) = select(["E8"])


def direct_auroc(score, positive):
    """P(score of a positive > score of a negative), ties counting one half: every pair."""
    pos, neg = score[positive], score[~positive]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def direct_average_precision(score, positive):
    """Σ_n (R_n − R_{n−1}) P_n over the distinct thresholds, from the highest down."""
    ap, last_recall = 0.0, 0.0
    for t in sorted(set(score.tolist()), reverse=True):
        flagged = score >= t
        tp = (flagged & positive).sum()
        recall = tp / positive.sum()
        ap += (recall - last_recall) * tp / flagged.sum()
        last_recall = recall
    return ap


def direct_fpr95(score, positive):
    """The smallest share of negatives flagged by a threshold that flags ≥ 95% of positives."""
    best = 1.0
    for t in set(score.tolist()):
        flagged = score >= t
        if (flagged & positive).sum() >= 0.95 * positive.sum():
            best = min(best, (flagged & ~positive).sum() / (~positive).sum())
    return best


def check_against_direct(score, unknown):
    got = e8.open_set_metrics(score, unknown)
    assert got["auroc"] == pytest.approx(direct_auroc(score, unknown))
    assert got["aupr_out"] == pytest.approx(direct_average_precision(score, unknown))
    assert got["aupr_in"] == pytest.approx(direct_average_precision(-score, ~unknown))
    assert got["fpr95"] == pytest.approx(direct_fpr95(score, unknown))


def test_open_set_metrics_on_a_hand_made_example():
    # 20 unknown (positive) and 10 known inputs; a tie across the classes at 0.5.
    unknown_scores = [0.99, 0.98, 0.97, 0.95, 0.93, 0.9, 0.88, 0.85, 0.8, 0.78]
    unknown_scores += [0.75, 0.72, 0.7, 0.68, 0.65, 0.6, 0.55, 0.5, 0.45, 0.1]
    known_scores = [0.96, 0.5, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.12, 0.05]
    score = np.array(unknown_scores + known_scores)
    unknown = np.array([True] * 20 + [False] * 10)
    check_against_direct(score, unknown)
    got = e8.open_set_metrics(score, unknown)
    # 19 of 20 unknowns are flagged at 0.45, which also flags the known 0.96 and 0.5: FPR 2/10.
    assert got["fpr95"] == pytest.approx(0.2)
    # Pairs: each unknown beats every known below it; 0.5 ties once.
    assert got["auroc"] == pytest.approx(direct_auroc(score, unknown))


@settings(max_examples=30, deadline=None)
@given(
    scores=st.lists(st.integers(0, 6), min_size=4, max_size=30),
    labels=st.lists(st.booleans(), min_size=4, max_size=30),
)
def test_open_set_metrics_match_the_direct_computation(scores, labels):
    n = min(len(scores), len(labels))
    score, unknown = np.array(scores[:n], dtype=float), np.array(labels[:n])
    if unknown.all() or not unknown.any():
        return
    check_against_direct(score, unknown)


def test_open_set_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="both known and unknown"):
        e8.open_set_metrics(np.array([0.1, 0.2]), np.array([True, True]))
    with pytest.raises(ValueError, match="non-finite"):
        e8.open_set_metrics(np.array([0.1, np.nan]), np.array([True, False]))
    with pytest.raises(ValueError, match="same length"):
        e8.open_set_metrics(np.array([0.1, 0.2, 0.3]), np.array([True, False]))


def test_null_responsibility_ranks_as_the_energy_with_a_constant_d0():
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier("null", 5, 8, 3, 4, d0=1.5)
    x = torch.randn(200, 5)
    result = e8.evaluate(
        model, x, torch.randint(0, 4, (200,)), torch.randn(300, 5) * 3, {"knn_bank": 100}
    )
    check = result["null_check"]
    assert check["closed_form_error"] < 1e-12 and check["closed_form_lse_error"] < 1e-12
    assert check["rank_violations"] == 0 and check["d0"] == pytest.approx(1.5)
    unknown = np.arange(300) % 3 == 0
    same = e8.open_set_metrics(result["scores"]["null"], unknown)
    energy = e8.open_set_metrics(result["scores"]["energy"], unknown)
    assert same == pytest.approx(energy, abs=1e-12)


def test_null_loss_gradient_on_d0_is_target_minus_responsibility():
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier("null", 5, 8, 3, 4, d0=0.5).double()
    x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 4, (16,))
    model.loss(x, y, null_target=0.05).backward()
    _, z = model(x)
    r0 = _open_set.null_responsibility(-z, model.null.d0).detach()
    # ∂ℓ/∂d₀ = t₀ − r₀ per sample, averaged over the batch.
    assert float(model.null.d0.grad) == pytest.approx(float((0.05 - r0).mean()), abs=1e-12)


def test_smoothing_ablation_is_label_smoothing_without_a_null():
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier("smoothing", 5, 8, 3, 4, d0=0.0).double()
    x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 4, (16,))
    assert model.null is None
    _, z = model(x)
    expected = torch.nn.functional.cross_entropy(z, y, label_smoothing=0.05).detach()
    loss = model.loss(x, y, null_target=0.05).detach()
    assert float(loss) == pytest.approx(float(expected), abs=1e-12)


def test_unknown_head_kind():
    with pytest.raises(ValueError, match="kind"):
        _open_set.OpenSetClassifier("cosine", 5, 8, 3, 4, d0=0.0)


def test_smoke_run(tmp_path):
    outcome = E8.run({**E8.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    for model in e8.MODELS:
        for score in ("msp", "energy", "max_logit", "mahalanobis", "knn"):
            assert 0 <= n[f"auroc_{model}_{score}"] <= 1
        assert 0 <= n[f"closed_world_share_{model}"] <= 1
    assert n["null_rank_violations"] == 0 and n["null_energy_auroc_gap"] < 1e-12
    assert -1 <= n["null_gain_over_best"] <= 1 and -1 <= n["null_gain_over_smoothing"] <= 1
    assert len(n["best_baseline_per_seed"]) == len(E8.configs["smoke"]["seeds"])
    assert n["unknown_classes"] == ["6", "7", "8", "9"]
    assert all((tmp_path / f.path).is_file() for f in outcome.figures)
    assert E8.judge(outcome).verdict not in ("not run", "invalid")
    for criterion in E8.rule.criteria:
        assert len(outcome.samples[criterion.number]) >= len(E8.configs["smoke"]["seeds"])

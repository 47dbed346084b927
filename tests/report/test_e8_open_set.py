"""E8: open-set metrics against a direct computation, the null-component identity, the rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em.objectives import append_null, cross_entropy, null_responsibility
from implicit_em.report import select
from implicit_em.report.experiments import _open_set
from implicit_em.report.experiments import _open_set_corruptions as corruptions
from implicit_em.report.experiments import _open_set_measures as measures
from implicit_em.report.experiments import _open_set_scores as e8_scores
from implicit_em.report.experiments import e8_open_set as e8
from implicit_em.report.experiments._neural import load_images
from implicit_em.report.experiments._open_set_splits import digits_as_images, random_split

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
    got = e8_scores.open_set_metrics(score, unknown)
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
    got = e8_scores.open_set_metrics(score, unknown)
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
        e8_scores.open_set_metrics(np.array([0.1, 0.2]), np.array([True, True]))
    with pytest.raises(ValueError, match="non-finite"):
        e8_scores.open_set_metrics(np.array([0.1, np.nan]), np.array([True, False]))
    with pytest.raises(ValueError, match="same length"):
        e8_scores.open_set_metrics(np.array([0.1, 0.2, 0.3]), np.array([True, False]))


CONFIG = {"null_target": 0.05, "oe_weight": 0.5, "knn_bank": 100, "knn_k": 3, "vim_dim": 2}


def test_null_responsibility_ranks_as_the_energy_with_a_constant_d0():
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier("null", 5, 8, 3, 4, d0=1.5)
    scorer = _open_set.Scorer(model, torch.randn(200, 5), torch.randint(0, 4, (200,)), CONFIG)
    x = torch.randn(300, 5) * 3
    check = scorer.null_check(x)
    assert check["closed_form_error"] < 1e-12
    assert check["rank_violations"] == 0 and check["d0"] == pytest.approx(1.5)
    scores = scorer.scores(x)
    unknown = np.arange(300) % 3 == 0
    same = e8_scores.open_set_metrics(scores["null"], unknown)
    energy = e8_scores.open_set_metrics(scores["energy"], unknown)
    assert same == pytest.approx(energy, abs=1e-12)
    assert "vim" not in scores  # ViM needs a linear head


def test_every_detector_scores_a_linear_head():
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier("softmax", 5, 8, 3, 4, d0=0.0)
    scorer = _open_set.Scorer(model, torch.randn(200, 5), torch.randint(0, 4, (200,)), CONFIG)
    scores = scorer.scores(torch.randn(30, 5))
    assert set(scores) == set(e8_scores.DETECTORS)
    assert all(v.shape == (30,) and np.isfinite(v).all() for v in scores.values())


@pytest.mark.parametrize("kind", ["null", "null_x"])
def test_null_loss_gradient_on_d0_is_target_minus_responsibility(kind):
    """∂ℓ/∂d₀ = t₀ − r₀ per sample (for d₀(x), on the per-input null distance)."""
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier(kind, 5, 8, 3, 4, d0=0.5).double()
    x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 4, (16,))
    h, z = model(x)
    d0 = model.null_distance(h)
    d0.retain_grad()
    extended = append_null(-z, d0)
    target = torch.nn.functional.one_hot(y, 5).double() * 0.95
    target[:, 4] += 0.05
    cross_entropy(extended, target).backward()
    r0 = null_responsibility(-z, d0).detach()
    torch.testing.assert_close(d0.grad * 16, (0.05 - r0).expand_as(d0.grad))
    loss = model.loss(x, y, {"null_target": 0.05})
    assert float(loss.detach()) == pytest.approx(float(cross_entropy(extended, target).detach()))


def test_input_dependent_null_is_a_broad_background_component():
    torch.manual_seed(0)
    null = _open_set.BackgroundNull(3, d0=0.5)
    h = torch.randn(7, 3)
    tau = 1.0 + torch.nn.functional.softplus(null.rho)
    assert float(tau.detach()) > 1.0
    torch.testing.assert_close(null(h), ((h - null.centre) ** 2).sum(1) / tau + 0.5)


def test_sigmoid_and_outlier_exposure_losses():
    torch.manual_seed(0)
    x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 4, (16,))
    sigmoid = _open_set.OpenSetClassifier("sigmoid", 5, 8, 3, 4, d0=0.0).double()
    _, z = sigmoid(x)
    one_hot = torch.nn.functional.one_hot(y, 4).double()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(z, one_hot, reduction="none")
    assert float(sigmoid.loss(x, y, CONFIG).detach()) == pytest.approx(
        float(bce.sum(1).mean().detach())
    )
    oe = _open_set.OpenSetClassifier("oe", 5, 8, 3, 4, d0=0.0).double()
    outliers = torch.randn(10, 5, dtype=torch.float64)
    _, z = oe(x)
    _, z_out = oe(outliers)
    # Hendrycks et al.: CE on known inputs + λ · CE from the uniform distribution on outliers.
    expected = torch.nn.functional.cross_entropy(z, y) + 0.5 * (-torch.log_softmax(z_out, 1).mean())
    assert float(oe.loss(x, y, CONFIG, outliers).detach()) == pytest.approx(
        float(expected.detach())
    )
    with pytest.raises(ValueError, match="outliers"):
        oe.loss(x, y, CONFIG)


def test_exposed_null_adds_the_outliers_cross_entropy_toward_none_of_the_above():
    """null_oe: the null_x loss on known inputs + λ · mean −log r₀ on the outliers."""
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier("null_oe", 5, 8, 3, 4, d0=0.5).double()
    x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 4, (16,))
    outliers = torch.randn(10, 5, dtype=torch.float64)
    h, z = model(x)
    target = torch.nn.functional.one_hot(y, 5).double() * 0.95
    target[:, 4] += 0.05
    known = cross_entropy(append_null(-z, model.null_distance(h)), target)
    h_out, z_out = model(outliers)
    r0 = null_responsibility(-z_out, model.null_distance(h_out))
    expected = known + 0.5 * (-torch.log(r0)).mean()
    got = model.loss(x, y, CONFIG, outliers)
    assert float(got.detach()) == pytest.approx(float(expected.detach()))
    assert isinstance(model.null, _open_set.BackgroundNull)
    with pytest.raises(ValueError, match="outliers"):
        model.loss(x, y, CONFIG)


def test_corruptions_on_known_answers():
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(4, 784, dtype=torch.float64)
    torch.testing.assert_close(corruptions.noise(x, 0.0, generator), x)
    torch.testing.assert_close(corruptions.contrast(x, 1.0, generator), x)
    flat = corruptions.contrast(x, 0.0, generator)
    torch.testing.assert_close(flat, x.mean(1, keepdim=True).expand_as(x))
    noisy = corruptions.noise(torch.zeros(2000, 784, dtype=torch.float64), 0.3, generator)
    assert float(noisy.std()) == pytest.approx(0.3, rel=0.01)
    # A point blurred: the separable Gaussian kernel, summing to one, centred on the point.
    point = torch.zeros(1, 784, dtype=torch.float64)
    point[0, 14 * 28 + 14] = 1.0
    blurred = corruptions.blur(point, 1.0, generator).reshape(28, 28)
    assert float(blurred.sum()) == pytest.approx(1.0)
    assert blurred[14, 14] == blurred.max() and blurred[14, 15] == pytest.approx(
        float(blurred[14, 14]) * np.exp(-0.5)
    )


def test_corrupt_draws_one_registered_corruption_per_row_and_stays_in_pixel_range():
    mean = torch.full((1, 784), 0.3)
    x = torch.rand(60, 784) - mean
    severities = {"noise": 0.5, "blur": 1.0, "contrast": 0.4}
    out = corruptions.corrupt(x, mean, severities, seed=3)
    again = corruptions.corrupt(x, mean, severities, seed=3)
    torch.testing.assert_close(out, again)
    pixels = out + mean
    assert float(pixels.min()) >= -1e-6 and float(pixels.max()) <= 1 + 1e-6
    assert not torch.allclose(out, x)
    alone = corruptions.corrupt(x, mean, {"contrast": 1.0}, seed=3)
    torch.testing.assert_close(alone, (x + mean).clamp(0, 1) - mean)
    with pytest.raises(ValueError, match="corruptions"):
        corruptions.corrupt(x, mean, {"fog": 1.0}, seed=0)


def test_the_corrupted_set_is_drawn_from_the_known_test_images():
    images = load_images({"data": "fashion-mnist", "n_train": 3000, "device": "cpu"})
    config = {"known": 6, "outlier": 2, "n_val": 100, "n_test": 500}
    split = random_split(images, digits_as_images(images.mean), 0, config)
    known = split.x_test[split.y_test >= 0]
    whole = corruptions.with_corruptions(split, images.mean, {"contrast": 1.0}, 0)
    torch.testing.assert_close(whole.x_corrupt, (known + images.mean).clamp(0, 1) - images.mean)
    some = corruptions.with_corruptions(split, images.mean, {"contrast": 1.0}, 0, rows=50)
    assert len(some.x_corrupt) == 50
    # Each drawn row is one of the known test images (contrast 1 leaves pixels in [0, 1]).
    distance = torch.cdist(some.x_corrupt, (known + images.mean).clamp(0, 1) - images.mean)
    assert float(distance.amin(1).max()) < 0.05  # float32 cdist; distinct images are ~10 apart


def test_gain_over_field_reads_the_strongest_softmax_detector():
    auroc = {"msp": 0.5, "energy": 0.65, "max_logit": 0.6, "mahalanobis": 0.7, "knn": 0.9}
    seed = {
        "softmax": {
            "val": {"msp": 0.6, "energy": 0.6, "max_logit": 0.6, "mahalanobis": 0.8, "knn": 0.7},
            "near": {n: {"auroc": a} for n, a in auroc.items()},
        },
        "null_x": {"val": {}, "near": {"null": {"auroc": 0.75}, "energy": {"auroc": 0.95}}},
        "smoothing": {"val": {}, "near": {"msp": {"auroc": 0.55}}},
    }
    # The strongest on the test set is KNN; on validation Mahalanobis is chosen. The null
    # head's own energy is not a field rival.
    assert measures.gain_over_field(seed, "null_x", "near") == pytest.approx(-0.15)
    assert measures.gain_over_field_chosen(seed, "null_x", "near") == pytest.approx(0.05)
    assert measures.gain_over_field(seed, "smoothing", "near", "msp") == pytest.approx(-0.35)
    # MSP is a field rival: it counts when it is the strongest.
    seed["softmax"]["near"]["msp"]["auroc"] = 0.97
    assert measures.gain_over_field(seed, "null_x", "near") == pytest.approx(-0.22)
    seed["softmax"]["val"]["msp"] = 0.95
    assert (
        measures.gain_over_chosen(seed, "null_x", ("softmax",), "near", measures.FIELD)[1]
        == "softmax/msp"
    )
    # A null that beats every field detector gains.
    seed["null_x"]["near"]["null"]["auroc"] = 0.99
    assert measures.gain_over_field(seed, "null_x", "near") == pytest.approx(0.02)


def test_smoothing_ablation_is_label_smoothing_without_a_null():
    torch.manual_seed(0)
    model = _open_set.OpenSetClassifier("smoothing", 5, 8, 3, 4, d0=0.0).double()
    x, y = torch.randn(16, 5, dtype=torch.float64), torch.randint(0, 4, (16,))
    assert model.null is None
    _, z = model(x)
    expected = torch.nn.functional.cross_entropy(z, y, label_smoothing=0.05).detach()
    loss = model.loss(x, y, {"null_target": 0.05}).detach()
    assert float(loss) == pytest.approx(float(expected), abs=1e-12)


def test_unknown_head_kind():
    with pytest.raises(ValueError, match="kind"):
        _open_set.OpenSetClassifier("cosine", 5, 8, 3, 4, d0=0.0)


def test_random_splits_keep_the_roles_apart():
    images = load_images({"data": "fashion-mnist", "n_train": 3000, "device": "cpu"})
    x_far = digits_as_images(images.mean)
    assert x_far.shape == (1797, 784)
    config = {"known": 6, "outlier": 2, "n_val": 100}
    first, again, other = (random_split(images, x_far, s, config) for s in (0, 0, 1))
    assert first.known == again.known and (first.known, first.outlier) != (
        other.known,
        other.outlier,
    )
    assert sorted(first.known + first.outlier + first.unknown) == list(range(10))
    assert len(first.unknown) == 2 and first.classes == 6
    assert set(first.y_train.tolist()) == set(range(6))
    assert len(first.x_val) == 200 and first.val_unknown.sum() == 100
    # The outlier classes' test images are left out; known test labels are remapped.
    y_test = images.y_test.numpy()
    kept = ~np.isin(y_test, first.outlier)
    assert len(first.x_test) == kept.sum()
    assert (first.test_unknown == np.isin(y_test[kept], first.unknown)).all()
    with pytest.raises(ValueError, match="unknown class"):
        random_split(images, x_far, 0, {**config, "known": 8})


def test_smoke_run(tmp_path):
    outcome = E8.run({**E8.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    for where in e8.SETS:
        for model in e8.MODELS:
            for score in ("msp", "energy", "max_logit", "mahalanobis", "knn", "react"):
                assert 0 <= n[f"auroc_{where}_{model}_{score}"] <= 1
        assert 0 <= n[f"auroc_{where}_softmax_vim"] <= 1
        assert 0 <= n[f"auroc_{where}_null_x_null"] <= 1
    for model in e8.MODELS:
        assert 0 <= n[f"share_{model}"] <= 1 and 0 <= n[f"share_far_{model}"] <= 1
    assert set(e8.SETS) == {"near", "corrupt", "far"}
    for null in e8.NULLS:
        key = f"{null}_gain_over_field_near"
        assert -1 <= n[key] <= 1 and outcome.samples[key]
        for where in e8.SETS:
            assert -1 <= n[f"{null}_gain_over_field_chosen_{where}"] <= 1
    # C14c is judged on the unseen classes alone; the corrupted images are shown beside it.
    assert {c.number for c in E8.rule.criteria} == {
        f"{null}_gain_over_field_near" for null in e8.NULLS
    }
    for null in e8.NULLS:
        assert -1 <= n[f"{null}_gain_over_field_corrupt"] <= 1
    assert n["null_rank_violations"] == 0
    assert -1 <= n["null_gain_over_best_near"] <= 1 and -1 <= n["null_x_gain_over_oe_far"] <= 1
    assert len(n["chosen_baseline_per_seed"]) == len(E8.configs["smoke"]["seeds"])
    assert all((tmp_path / f.path).is_file() for f in outcome.figures)
    assert E8.judge(outcome).verdict not in ("not run", "invalid")
    for criterion in E8.rule.criteria:
        assert len(outcome.samples[criterion.number]) >= len(E8.configs["smoke"]["seeds"])


def test_a_split_can_keep_a_random_subset_of_the_test_images():
    images = load_images({"data": "fashion-mnist", "n_train": 3000, "device": "cpu"})
    x_far = digits_as_images(images.mean)
    config = {"known": 6, "outlier": 2, "n_val": 100, "n_test": 500}
    split = random_split(images, x_far, 0, config)
    assert len(split.x_test) == 500 and split.test_unknown.any() and (~split.test_unknown).any()
    assert not np.isin(split.outlier, split.unknown).any()

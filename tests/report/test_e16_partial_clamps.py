"""E16's parts on worked examples: the supervision each arm builds, the rivals written to their
published definitions (PRODEN, generalized cross-entropy), and EM's closed-form M-step."""

from __future__ import annotations

import math

import pytest
import torch

from implicit_em.report.experiments import _imperfect_labels as il
from implicit_em.report.experiments import _partial_clamps as pc

CONFIG = {
    "label_fraction": 0.05,
    "candidates": 3,
    "noise": 0.4,
    "annotators": 5,
    "crowd_accuracy": [0.5, 0.5],
    "crowd_bias": 1.0,
}


def test_each_arm_builds_the_supervision_it_names():
    y = torch.arange(10).repeat(40)
    semi, naive = il.supervise("semi", y, 10, CONFIG, 0)
    labelled = naive >= 0
    assert semi.joint and int(labelled.sum()) == 10 * 2  # 5% of 40 rows per class
    assert bool(semi.labels[~labelled].all()) and bool((semi.labels[labelled].sum(1) == 1).all())
    partial, naive = il.supervise("partial", y, 10, CONFIG, 0)
    assert bool((partial.labels.sum(1) == 3).all())
    assert bool(partial.labels[torch.arange(400), y].all())  # the true class is a candidate
    assert bool(partial.labels[torch.arange(400), naive].all())
    noisy, _ = il.supervise("noisy_asym", y, 10, CONFIG, 0)
    flipped = noisy.labels != y
    assert bool((noisy.labels[flipped] == (y[flipped] + 1) % 10).all())
    assert abs(float(flipped.float().mean()) - 0.4) < 0.08
    z = torch.randn(400, 3, generator=torch.Generator().manual_seed(0)) + y[:, None].float()
    inst, _ = il.supervise("noisy_inst", y, 10, CONFIG, 0, z)
    assert inst.kind == "noisy" and inst.known is None
    crowd, majority = il.supervise("crowd", y, 10, CONFIG, 0)
    assert crowd.labels.shape == (400, 5)
    wrong = crowd.labels != y[:, None]
    assert bool((crowd.labels[wrong] == ((y[:, None] + 1) % 10).expand(400, 5)[wrong]).all())
    assert majority.shape == y.shape


def test_instance_dependent_noise_flips_to_the_nearest_other_class_and_flips_it_more():
    # Three classes on a line at 0, 1 and 10: class 0 and 1 are easily taken for each other,
    # class 2 for nothing; a row flips to its nearest other class, class 2's rows almost never.
    y = torch.arange(3).repeat(400)
    z = torch.tensor([0.0, 1.0, 10.0])[y][:, None] + 0.3 * torch.randn(
        1200, 1, generator=torch.Generator().manual_seed(0)
    )
    flip, other = il._instance_flips(z, y, 3, 0.4, torch.Generator().manual_seed(1))
    assert bool((other[y == 0] == 1).all()) and bool((other[y == 1] == 0).all())
    assert float(flip[y == 2].float().mean()) < 0.01
    assert float(flip[y < 2].float().mean()) > 0.5
    assert 0.3 < float(flip.float().mean()) <= 0.41
    with pytest.raises(ValueError, match="noisy_inst needs the features z"):
        il.supervise("noisy_inst", y, 3, {"noise": 0.4}, 0)


def test_the_known_transitions_are_stochastic_and_right():
    for arm in ("noisy_sym", "noisy_asym"):
        t = il._transition(arm, 4, 0.4)
        torch.testing.assert_close(t.sum(1), torch.ones(4))
        torch.testing.assert_close(t.diagonal(), torch.full((4,), 0.6))
    assert math.isclose(float(il._transition("noisy_asym", 4, 0.4)[0, 1]), 0.4, rel_tol=1e-6)


def test_proden_reweights_candidates_by_the_model_s_confidence():
    # Two rows, three classes; the model puts all prior mass on class 0 at the origin.
    z = torch.zeros(2, 1)
    candidates = torch.tensor([[True, True, False], [False, True, True]])
    model = pc.proden(z, candidates, torch.zeros(3, 1), epochs=1, steps=0, lr=0.1)
    # with no steps the weights stay uniform over each candidate set: the model is the start
    torch.testing.assert_close(model.posteriors(z), torch.full((2, 3), 1 / 3))
    r = torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]])
    weights = r * candidates / (r * candidates).sum(-1, keepdim=True)
    torch.testing.assert_close(weights[0], torch.tensor([0.625, 0.375, 0.0]))
    torch.testing.assert_close(weights[1], torch.tensor([0.0, 0.6, 0.4]))


def test_generalized_cross_entropy_is_its_formula():
    # At the start (all prototypes at the origin, uniform prior) p_y = 1/K for every row.
    z = torch.zeros(4, 2)
    labels = torch.tensor([0, 1, 2, 0])
    model = pc.Model(torch.zeros(3, 2))
    log_p = torch.log_softmax(-model.distances(z), -1).gather(1, labels[:, None])
    q = 0.7
    value = float(((1 - torch.exp(q * log_p)) / q).mean())
    assert math.isclose(value, (1 - (1 / 3) ** q) / q, rel_tol=1e-6)


def test_em_s_joint_m_step_is_the_responsibility_weighted_mean():
    z = torch.tensor([[0.0], [2.0], [10.0]])
    posterior = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    torch.testing.assert_close(pc._closed_form_m_step(z, posterior), torch.tensor([[1.0], [10.0]]))


def test_gd_and_em_agree_on_a_separable_clamp_with_a_known_transition():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(3).repeat_interleave(60)
    z = 6 * torch.eye(3)[y] + torch.randn(180, 3, generator=g)
    transition = 0.7 * torch.eye(3) + 0.3 * torch.roll(torch.eye(3), 1, dims=1)
    flip = torch.rand(180, generator=g) < 0.3
    noisy = torch.where(flip, (y + 1) % 3, y)
    supervision = pc.Supervision("noisy", noisy, known=transition)
    start = il.class_means(z, noisy, 3)
    gd, _ = pc.fit_gd(z, supervision, start, 300, 0.05, 0.8)
    em, _ = pc.fit_em(z, supervision, start, 20, 20, 0.05, 0.8)
    assert pc.agreement(gd, em, z) > 0.97
    assert pc.accuracy(gd, z, y) > 0.95 and pc.accuracy(em, z, y) > 0.95


def test_the_shared_covariance_model_is_the_gaussian_posterior():
    g = torch.Generator().manual_seed(1)
    means = torch.randn(3, 2, generator=g)
    model = pc.Model(means, shared_covariance=True)
    with torch.no_grad():
        model.factor.copy_(torch.tensor([[1.5, 0.0], [0.4, 0.7]]))
        model.prior.copy_(torch.tensor([0.0, 1.0, -0.5]))
    precision = model.factor @ model.factor.T
    z = torch.randn(5, 2, generator=g)
    gaussian = torch.distributions.MultivariateNormal(means, precision_matrix=precision)
    log_joint = gaussian.log_prob(z[:, None, :]) + torch.log_softmax(model.prior, 0)
    expected = torch.softmax(log_joint, -1)
    torch.testing.assert_close(model.posteriors(z), expected, atol=1e-5, rtol=1e-5)
    # the distances are the negative log joint up to the constant (D/2) log 2 pi
    offset = -log_joint.detach() - model.distances(z).detach()
    torch.testing.assert_close(offset, torch.full_like(offset, math.log(2 * math.pi)))


def test_em_s_joint_m_step_fits_the_shared_covariance():
    z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 1.0], [10.0, -1.0]])
    posterior = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    means = pc._closed_form_m_step(z, posterior)
    factor = pc._closed_form_factor(z, posterior, means)
    covariance = torch.tensor([[0.5, 0.0], [0.0, 0.5]]) + 1e-4 * torch.eye(2)
    torch.testing.assert_close(factor @ factor.T, torch.linalg.inv(covariance))


def _blobs(n: int = 90) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    y = torch.arange(3).repeat(n // 3)
    return 5 * torch.eye(3)[y] + torch.randn(n, 3, generator=g), y


def test_without_clamp_takes_the_labels_at_face_value():
    z, y = _blobs()
    config = {**CONFIG, "steps": 40, "lr": 0.05}
    start = pc.Model(il.class_means(z, y, 3))
    for arm in ("semi", "partial", "noisy_sym", "crowd"):
        supervision, naive = il.supervise(arm, y, 3, {**CONFIG, "label_fraction": 0.2}, 0)
        model = il.without_clamp(arm, z, supervision, naive, start, config)
        if arm == "semi":
            rows = naive >= 0
            expected = pc.fit_targets(z[rows], naive[rows], start, 40, 0.05)
        elif arm == "partial":
            mask = supervision.labels.float()
            expected = pc.fit_targets(z, mask / mask.sum(-1, keepdim=True), start, 40, 0.05)
        else:
            expected = pc.fit_targets(z, naive, start, 40, 0.05)
        torch.testing.assert_close(model.prototypes, expected.prototypes)
    # the semi-supervised naive model sees only the labelled rows: it differs from a fit to all
    supervision, naive = il.supervise("semi", y, 3, {**CONFIG, "label_fraction": 0.2}, 0)
    everything = pc.fit_targets(z, y, start, 40, 0.05)
    alone = il.without_clamp("semi", z, supervision, naive, start, config)
    assert not torch.allclose(alone.prototypes, everything.prototypes)


def test_clean_accuracies_set_the_model_against_lda_and_logistic_regression():
    z, y = _blobs(120)
    data = {"z_train": z[:90], "y_train": y[:90], "z_test": z[90:], "y_test": y[90:]}
    scores = il.clean_accuracies(data, {"steps": 60, "lr": 0.05})
    assert set(scores) == {"ours", "lda", "logistic"}
    assert all(v > 0.9 for v in scores.values())
    shuffled = {**data, "y_test": y[90:].roll(1)}  # wrong test labels: every model fails
    assert all(v < 0.5 for v in il.clean_accuracies(shuffled, {"steps": 60, "lr": 0.05}).values())

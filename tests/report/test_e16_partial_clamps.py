"""E16's parts on worked examples: the supervision each arm builds, the rivals written to their
published definitions (PRODEN, generalized cross-entropy), and EM's closed-form M-step."""

from __future__ import annotations

import math

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
    crowd, majority = il.supervise("crowd", y, 10, CONFIG, 0)
    assert crowd.labels.shape == (400, 5)
    wrong = crowd.labels != y[:, None]
    assert bool((crowd.labels[wrong] == ((y[:, None] + 1) % 10).expand(400, 5)[wrong]).all())
    assert majority.shape == y.shape


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

"""The partial-clamp objectives: gradient = clamped minus free responsibilities, and the cases
that reduce to known objectives (cross-entropy, the mixture NLL, no loss at all)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em import objectives
from implicit_em.core import responsibilities

DT = torch.float64


def _d(seed: int, n: int = 6, k: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (3 * torch.randn(n, k, generator=g, dtype=DT)).requires_grad_(True)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 7), scale=st.floats(0.1, 20.0))
def test_the_gradient_is_clamped_minus_free_responsibilities(seed, k, scale):
    g = torch.Generator().manual_seed(seed)
    d = (scale * torch.randn(5, k, generator=g, dtype=DT)).requires_grad_(True)
    log_w = torch.log(torch.rand(5, k, generator=g, dtype=DT))
    log_w[:, 0] = torch.where(torch.rand(5, generator=g) < 0.3, float("-inf"), log_w[:, 0])
    loss = objectives.clamped_nll(d, log_w, reduction="sum")
    (grad,) = torch.autograd.grad(loss, d)
    expected = objectives.clamped_responsibilities(d.detach(), log_w) - responsibilities(d.detach())
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=0)
    joint = objectives.clamped_nll(d, log_w, conditional=False, reduction="sum")
    (grad_joint,) = torch.autograd.grad(joint, d)
    torch.testing.assert_close(
        grad_joint, objectives.clamped_responsibilities(d.detach(), log_w), atol=1e-12, rtol=0
    )


def test_a_one_class_candidate_set_is_cross_entropy():
    d = _d(0)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    onehot = torch.nn.functional.one_hot(y, 5).bool()
    torch.testing.assert_close(
        objectives.candidate_set_nll(d, onehot, reduction="none"),
        objectives.cross_entropy(d, y, reduction="none"),
    )


def test_an_unlabeled_row_gives_no_loss_conditionally_and_the_mixture_nll_jointly():
    d = _d(1)
    everything = torch.ones_like(d, dtype=torch.bool)
    conditional = objectives.candidate_set_nll(d, everything, reduction="none")
    torch.testing.assert_close(conditional, torch.zeros(6, dtype=DT), atol=1e-12, rtol=0)
    joint = objectives.candidate_set_nll(d, everything, conditional=False, reduction="none")
    torch.testing.assert_close(joint, objectives.mixture_nll(d, reduction="none"))


def test_a_noise_free_transition_is_cross_entropy_and_uniform_noise_carries_nothing():
    d = _d(2)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    eye = torch.eye(5, dtype=DT)
    torch.testing.assert_close(
        objectives.transition_nll(d, y, eye, reduction="none"),
        objectives.cross_entropy(d, y, reduction="none"),
    )
    uniform = torch.full((5, 5), 0.2, dtype=DT)
    loss = objectives.transition_nll(d, y, uniform, reduction="sum")
    (grad,) = torch.autograd.grad(loss, d)
    assert float(grad.abs().max()) < 1e-12  # a label that says nothing moves nothing


def test_one_perfect_annotator_is_the_label_and_missing_labels_are_skipped():
    d = _d(3)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    eye = torch.eye(5, dtype=DT)
    noisy = torch.softmax(torch.randn(5, 5, dtype=DT), dim=-1)
    confusions = torch.stack([eye, noisy])
    annotations = torch.stack([y, torch.full_like(y, -1)], dim=1)
    torch.testing.assert_close(
        objectives.crowd_nll(d, annotations, confusions, reduction="none"),
        objectives.cross_entropy(d, y, reduction="none"),
    )


def test_a_soft_label_is_evidence_not_a_target():
    d = _d(4)
    t = torch.softmax(torch.randn(6, 5, dtype=DT), dim=-1)
    value = objectives.soft_label_nll(d, t, reduction="none")
    torch.testing.assert_close(value, -torch.log((t * responsibilities(d)).sum(-1)))
    # only the ratios of t matter, unlike cross-entropy's soft target
    torch.testing.assert_close(
        objectives.soft_label_nll(d, 3 * t, reduction="none"),
        value + torch.log(torch.tensor(1 / 3, dtype=DT)),
    )


def test_learned_transition_and_confusions_get_gradients():
    d = _d(5)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    module = objectives.TransitionNLL(5)
    module(d.float(), y).backward()
    assert module.logits.grad is not None and torch.isfinite(module.logits.grad).all()
    torch.testing.assert_close(module.transition.sum(-1), torch.ones(5))
    crowd = objectives.CrowdNLL(3, 5)
    annotations = torch.randint(-1, 5, (6, 3))
    crowd(d.float(), annotations).backward()
    assert crowd.logits.grad is not None and torch.isfinite(crowd.logits.grad).all()
    fixed = objectives.TransitionNLL(5, transition=torch.eye(5) * 0.5 + 0.1, learn=False)
    assert not list(fixed.parameters())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda d: objectives.candidate_set_nll(d, torch.zeros_like(d, dtype=torch.bool)),
            "positive weight",
        ),
        (lambda d: objectives.candidate_set_nll(d, torch.ones_like(d)), "boolean mask"),
        (
            lambda d: objectives.candidate_set_nll(d, torch.ones(2, 2, dtype=torch.bool)),
            "d's shape",
        ),
        (lambda d: objectives.soft_label_nll(d, -torch.ones_like(d)), "non-negative"),
        (
            lambda d: objectives.transition_nll(d, torch.tensor([0, 1, 2, 3, 4, 5]), torch.eye(5)),
            r"\[0, 4\]",
        ),
        (
            lambda d: objectives.transition_nll(d, torch.zeros(6).long(), torch.eye(4)),
            r"\[\.\.\., 5, 5\]",
        ),
        (
            lambda d: objectives.crowd_nll(d, torch.full((6, 2), -2), torch.eye(5).expand(2, 5, 5)),
            r"\[-1, 4\]",
        ),
        (
            lambda d: objectives.crowd_nll(
                d, torch.zeros(6, 3).long(), torch.eye(5).expand(2, 5, 5)
            ),
            "annotators",
        ),
    ],
)
def test_bad_input_is_one_clear_error(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(_d(6).detach())

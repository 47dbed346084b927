"""One-cluster starts, coverage, the supervised head losses and the coupling through an encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from implicit_em.report.experiments import _competition as cp
from implicit_em.report.experiments._neural import MLPEncoder


def test_one_cluster_start_draws_every_prototype_from_one_cluster() -> None:
    x = torch.arange(40.0).reshape(20, 2)
    labels = np.repeat([0, 1, 2, 3], 5)
    start = cp.one_cluster_start(x, labels, 3, seed=0, cluster=2)
    allowed = {tuple(r) for r in x[10:15].tolist()}
    assert all(tuple(r) in allowed for r in start.tolist())
    assert len({tuple(r) for r in start.tolist()}) == 3
    drawn = cp.one_cluster_start(x, labels, 4, seed=1)
    assert len({int(labels[int(r[0]) // 2]) for r in drawn.tolist()}) == 1
    with pytest.raises(ValueError, match="needs 6 rows"):
        cp.one_cluster_start(x, labels, 6, seed=0, cluster=0)


def test_coverage_counts_centres_with_a_prototype_nearby() -> None:
    centres = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    prototypes = torch.tensor([[0.1, 0.0], [0.2, 0.1], [4.0, 0.0]])
    assert cp.coverage(prototypes, centres, 0.5) == 1
    assert cp.coverage(prototypes, centres, 1.5) == 2


def test_head_gradients_are_responsibilities_only_for_cross_entropy() -> None:
    d = torch.rand(6, 4, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    r = torch.softmax(-d.detach(), dim=-1)
    (g,) = torch.autograd.grad(cp.head_loss("ce", d, y) * 6, d)
    torch.testing.assert_close(g, torch.nn.functional.one_hot(y, 4).double() - r)
    (g,) = torch.autograd.grad(cp.head_loss("ovr_sigmoid", d, y, bias=1.0) * 6, d)
    torch.testing.assert_close(
        g, torch.nn.functional.one_hot(y, 4).double() - torch.sigmoid(1.0 - d.detach())
    )
    (g,) = torch.autograd.grad(cp.head_loss("mse", d, y, bias=0.5) * 6, d)
    z = torch.exp(0.5 - d.detach())
    torch.testing.assert_close(g, -2 * (z - torch.nn.functional.one_hot(y, 4)) * z)
    with pytest.raises(ValueError, match="smoothing"):
        cp.head_loss("mse", d, y, smoothing=0.1)
    predicted, confidence = cp.head_confidence("ce", d.detach())
    assert predicted.tolist() == d.detach().argmin(1).tolist()
    assert ((confidence > 0) & (confidence <= 1)).all()


def test_mlp_update_norm_is_the_norm_of_the_encoder_gradient() -> None:
    torch.manual_seed(0)
    encoder = MLPEncoder(7, 5, 3).double()
    x = torch.randn(4, 7, dtype=torch.float64)
    v = torch.randn(4, 3, dtype=torch.float64)
    got = cp.mlp_update_norm(encoder.hidden, encoder.out, x, v)
    for i in range(4):
        grads = torch.autograd.grad((encoder(x[i]) * v[i]).sum(), list(encoder.parameters()))
        expected = torch.sqrt(sum((g**2).sum() for g in grads))
        assert float(got[i]) == pytest.approx(float(expected), rel=1e-10)


def test_wrong_class_feature_gradient_matches_autograd() -> None:
    torch.manual_seed(1)
    h = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    prototypes = torch.randn(4, 3, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    d = ((h[:, None, :] - prototypes[None]) ** 2).sum(-1)
    grad = cp.head_gradient("ce", d, y)
    wrong = torch.ones(6, 4, dtype=torch.bool).scatter(1, y[:, None], False)
    (expected,) = torch.autograd.grad((torch.where(wrong, grad, 0.0) * d).sum(), h)
    got = cp.wrong_class_feature_gradient(grad, h.detach(), prototypes, y)
    torch.testing.assert_close(got, expected)


def test_encoder_coupling_sees_normalization_and_not_independent_weights() -> None:
    g = torch.Generator().manual_seed(0)
    d = 3 * torch.rand(4000, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 5, (4000,), generator=g)
    wrong = torch.ones(4000, 5, dtype=torch.bool).scatter(1, y[:, None], False)
    r = torch.softmax(-d, dim=-1)
    # Update norms from the wrong classes' weights alone: normalized (r) or independent (sigmoid).
    normalized = torch.where(wrong, r, 0.0).sum(1)
    independent = torch.where(wrong, torch.sigmoid(1.0 - d), 0.0).sum(1)
    assert cp.encoder_coupling(normalized, d, y) > 0.3
    assert abs(cp.encoder_coupling(independent, d, y)) < 0.1
    assert np.isnan(cp.encoder_coupling(torch.ones(4000, dtype=torch.float64), d, y))
    with pytest.raises(ValueError, match="update_norm"):
        cp.encoder_coupling(normalized[:10], d, y)


def test_wrong_class_competition_sees_a_shared_normalizer_and_not_independent_outputs() -> None:
    g = torch.Generator().manual_seed(0)
    d = 3 * torch.rand(4000, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 5, (4000,), generator=g)
    # Cross-entropy's per-sample gradient r - onehot against independent sigmoids sigma(1 - d).
    shared = cp.head_gradient("ce", d, y)
    independent = cp.head_gradient("ovr_sigmoid", d, y, bias=1.0)
    assert cp.wrong_class_competition(shared, d, y) > 0.3
    assert abs(cp.wrong_class_competition(independent, d, y)) < 0.05
    with pytest.raises(ValueError, match="K >= 3"):
        cp.wrong_class_competition(shared[:, :2], d[:, :2], y.clamp(max=1))


def test_blobs_are_four_labelled_clusters() -> None:
    x, labels, centres = cp.blobs(400, 0)
    assert x.shape == (400, 2) and centres.shape == (4, 2) and set(labels) == {0, 1, 2, 3}
    for c in range(4):
        assert torch.dist(x[torch.as_tensor(labels == c)].mean(0), centres[c]) < 0.2


def test_held_out_measures_of_a_perfect_confident_head() -> None:
    y = torch.arange(40) % 4
    d = 10.0 * (1 - torch.nn.functional.one_hot(y, 4).double())
    m = cp.held_out_measures("ce", d, y)
    assert m["accuracy"] == 1.0 and m["ece"] < 1e-3
    m = cp.held_out_measures("mse", d, y, bias=0.0)
    assert m["accuracy"] == 1.0 and m["ece"] < 1e-3
    assert set(m) == {"accuracy", "ece"}

"""Objectives: values against their definitions, gradients against the stated closed forms."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import implicit_em as iem
from implicit_em import objectives as obj

DT = torch.float64


def _rand(seed: int, *shape: int, scale: float = 3.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), b=st.integers(1, 6), k=st.integers(1, 6))
def test_mixture_nll_gradient_is_plus_r(seed, b, k):
    d = _rand(seed, b, k).requires_grad_(True)
    log_prior = torch.log_softmax(_rand(seed + 1, k), -1)
    log_det = _rand(seed + 2, k, scale=0.5).requires_grad_(True)
    loss = obj.mixture_nll(d, log_prior=log_prior, log_det=log_det, reduction="sum")
    expected = -torch.logsumexp(-d + log_det + log_prior, -1).sum()
    torch.testing.assert_close(loss, expected)
    grad_d, grad_v = torch.autograd.grad(loss, (d, log_det))
    r = iem.responsibilities(d.detach() - log_det.detach(), log_prior=log_prior)
    torch.testing.assert_close(grad_d, r, atol=1e-14, rtol=0)
    torch.testing.assert_close(grad_v, -r.sum(0), atol=1e-13, rtol=0)


def test_mixture_nll_reductions_and_module_prior():
    d = _rand(0, 5, 3)
    per_sample = obj.mixture_nll(d, reduction="none")
    assert per_sample.shape == (5,)
    torch.testing.assert_close(obj.mixture_nll(d), per_sample.mean())
    torch.testing.assert_close(obj.mixture_nll(d, reduction="sum"), per_sample.sum())
    module = obj.MixtureNLL(3, learnable_prior=True).double()
    loss = module(d)
    loss.backward()
    # d/dlogits_j = mean_b (pi_j - r_bj) with uniform pi.
    r = iem.responsibilities(d, log_prior=module.log_prior().detach())
    torch.testing.assert_close(module.prior_logits.grad, (1 / 3 - r).mean(0), atol=1e-14, rtol=0)
    fixed = obj.MixtureNLL(3, log_prior=torch.log(torch.tensor([0.5, 0.25, 0.25])))
    assert "prior_logits" in dict(fixed.named_buffers())
    with pytest.raises(ValueError, match="reduction"):
        obj.mixture_nll(d, reduction="avg")
    with pytest.raises(ValueError, match="log_det"):
        obj.mixture_nll(d, log_det=torch.zeros(4, dtype=DT))
    with pytest.raises(ValueError, match="log_prior must have shape"):
        obj.MixtureNLL(3, log_prior=torch.zeros(2))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(2, 7), eps=st.sampled_from([0.0, 0.1, 0.3]))
def test_cross_entropy_equals_torch_and_gradient_is_t_minus_r(seed, k, eps):
    d = _rand(seed, 6, k).requires_grad_(True)
    y = torch.randint(0, k, (6,), generator=torch.Generator().manual_seed(seed))
    loss = obj.cross_entropy(d, y, label_smoothing=eps, reduction="sum")
    torch.testing.assert_close(loss, F.cross_entropy(-d, y, label_smoothing=eps, reduction="sum"))
    (grad,) = torch.autograd.grad(loss, d)
    t = obj.soft_targets(d.detach(), y, eps)
    torch.testing.assert_close(grad, t - iem.responsibilities(d.detach()), atol=1e-14, rtol=0)


def test_cross_entropy_soft_targets_and_excluded_components():
    d = _rand(1, 4, 5).requires_grad_(True)
    t = torch.softmax(_rand(2, 4, 5), -1)
    loss = obj.cross_entropy(d, t)
    torch.testing.assert_close(loss, F.cross_entropy(-d, t))
    d_inf = torch.tensor([[0.0, float("inf"), 1.0]], dtype=DT, requires_grad=True)
    loss = obj.cross_entropy(d_inf, torch.tensor([0]))
    (grad,) = torch.autograd.grad(loss, d_inf)
    assert torch.isfinite(loss) and torch.isfinite(grad).all() and grad[0, 1] == 0


def test_cross_entropy_module_and_dim():
    d = _rand(3, 2, 4, 3)  # classes on dim 1
    y = torch.tensor([[0, 1, 2], [3, 3, 0]])
    loss = obj.cross_entropy(d, y, dim=1)
    torch.testing.assert_close(loss, F.cross_entropy(-d, y))
    assert obj.CrossEntropy(0.1)(d[:, :, 0], y[:, 0]).shape == ()


@pytest.mark.parametrize(
    ("target", "match"),
    [
        (torch.tensor([0, 5]), r"\[0, 4\]"),
        (torch.tensor([-1, 0]), r"\[0, 4\]"),
        (torch.tensor([0, 1, 2]), "shape"),
        (torch.full((2, 5), 0.2, dtype=DT) * 2, "sum to 1"),
        (-torch.full((2, 5), 0.2, dtype=DT), "non-negative"),
        (torch.tensor([True, False]), "integer class indices"),
    ],
)
def test_cross_entropy_bad_targets(target, match):
    with pytest.raises((ValueError, TypeError), match=match):
        obj.cross_entropy(_rand(0, 2, 5), target)


def test_label_smoothing_range():
    with pytest.raises(ValueError, match="label_smoothing"):
        obj.cross_entropy(_rand(0, 2, 3), torch.tensor([0, 1]), label_smoothing=1.5)
    with pytest.raises(ValueError, match="label_smoothing"):
        obj.CrossEntropy(label_smoothing=-0.1)


def test_null_component_both_regimes():
    d = _rand(4, 6, 3)
    null = obj.NullComponent(d0=1.0).double()
    ext = null(d)
    assert ext.shape == (6, 4)
    torch.testing.assert_close(ext[:, -1], torch.ones(6, dtype=DT))
    r0 = null.responsibility(d)
    torch.testing.assert_close(r0, iem.responsibilities(ext)[:, -1].detach())
    obj.mixture_nll(ext, reduction="sum").backward()
    torch.testing.assert_close(null.d0.grad, r0.detach().sum())
    null.d0.grad = None
    y = torch.tensor([0, 3, 1, 3, 2, 0])  # 3 = K: reject
    obj.cross_entropy(null(d), y, reduction="sum").backward()
    torch.testing.assert_close(null.d0.grad, ((y == 3).to(DT) - r0.detach()).sum())
    fixed = obj.NullComponent(d0=2.0, learnable=False)
    assert "d0" in dict(fixed.named_buffers())
    per_input = obj.append_null(d, torch.arange(6, dtype=DT))
    torch.testing.assert_close(per_input[:, -1], torch.arange(6, dtype=DT))
    with pytest.raises(ValueError, match="d0"):
        obj.append_null(d, torch.zeros(5, dtype=DT))


def test_null_rejects_far_inputs():
    prototypes = torch.tensor([[0.0, 0.0], [4.0, 0.0]], dtype=DT)
    near = torch.tensor([[0.1, 0.0]], dtype=DT)
    far = torch.tensor([[40.0, 40.0]], dtype=DT)
    d0 = torch.tensor(3.0, dtype=DT)
    r_near = obj.null_responsibility(iem.distances.squared_euclidean(near, prototypes), d0)
    r_far = obj.null_responsibility(iem.distances.squared_euclidean(far, prototypes), d0)
    assert r_near < 0.1 and r_far > 0.999


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), sigma=st.floats(0.1, 10.0))
def test_correntropy_gradient_depends_on_own_distance_only(seed, sigma):
    d = _rand(seed, 3, 4).abs().requires_grad_(True)
    loss = obj.correntropy(d, sigma, reduction="sum")
    torch.testing.assert_close(loss, (1 - torch.exp(-(d**2) / sigma**2)).sum())
    (grad,) = torch.autograd.grad(loss, d)
    expected = 2 * d.detach() / sigma**2 * torch.exp(-(d.detach() ** 2) / sigma**2)
    torch.testing.assert_close(grad, expected, atol=1e-14, rtol=0)


def test_correntropy_ignores_outliers_and_rejects_bad_sigma():
    d = torch.tensor([[1e3, 0.5]], dtype=DT, requires_grad=True)
    obj.correntropy(d, 1.0).backward()
    assert d.grad[0, 0] == 0 and d.grad[0, 1] > 0
    for sigma in (0.0, -1.0):
        with pytest.raises(ValueError, match="sigma"):
            obj.correntropy(d, sigma)
        with pytest.raises(ValueError, match="sigma"):
            obj.CorrentropyLoss(sigma)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), bias=st.floats(-3, 3))
def test_sigmoid_bce_gradient_is_t_minus_sigmoid(seed, bias):
    d = _rand(seed, 5, 4).requires_grad_(True)
    y = torch.randint(0, 4, (5,), generator=torch.Generator().manual_seed(seed))
    loss = obj.sigmoid_bce(d, y, bias=bias, reduction="sum")
    t = F.one_hot(y, 4).to(DT)
    torch.testing.assert_close(
        loss, F.binary_cross_entropy_with_logits(bias - d, t, reduction="sum")
    )
    (grad,) = torch.autograd.grad(loss, d)
    torch.testing.assert_close(grad, t - torch.sigmoid(bias - d.detach()), atol=1e-14, rtol=0)


def test_sigmoid_bce_float_targets_and_module():
    d = _rand(0, 3, 2)
    t = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.5, 1.0]], dtype=DT)
    module = obj.SigmoidBCE(bias=0.5, learnable_bias=True).double()
    loss = module(d, t)
    loss.backward()
    assert module.bias.grad is not None
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        obj.sigmoid_bce(d, t * 2)


def test_volume_surrogates():
    gen = torch.Generator().manual_seed(0)
    d = torch.randn(64, 3, generator=gen, dtype=DT)
    var = obj.variance_penalty(d)
    torch.testing.assert_close(var, -torch.log(d.var(0) + 1e-6).sum())
    decor = obj.decorrelation_penalty(d)
    corr = torch.corrcoef(d.T)
    torch.testing.assert_close(
        decor, ((corr - torch.eye(3, dtype=DT)) ** 2).sum(), atol=1e-6, rtol=0
    )
    correlated = torch.cat([d[:, :1], d[:, :1], d[:, 1:2]], dim=1)
    assert obj.decorrelation_penalty(correlated) > 1.9
    collapsed = torch.cat([d[:, :2], torch.full((64, 1), 3.0, dtype=DT)], dim=1)
    assert obj.variance_penalty(collapsed) > obj.variance_penalty(d) + 10
    total = obj.VolumeSurrogate(2.0, 0.5)(d)
    torch.testing.assert_close(total, 2 * var + 0.5 * decor)
    with pytest.raises(ValueError, match="B >= 2"):
        obj.variance_penalty(d[:1])
    with pytest.raises(ValueError, match="B >= 2"):
        obj.decorrelation_penalty(d[0])


def test_log_det_penalty_is_the_variance_penalty_plus_minus_log_det_corr():
    gen = torch.Generator().manual_seed(1)
    d = torch.randn(64, 3, generator=gen, dtype=DT) * torch.tensor([1.0, 2.0, 0.5], dtype=DT)
    corr = torch.corrcoef(d.T)
    expected = obj.variance_penalty(d, eps=0.0) - torch.logdet(corr)
    torch.testing.assert_close(obj.log_det_penalty(d, eps=0.0), expected)
    # A constant unit costs -log(eps) (plus the rest): the penalty is bounded only by eps.
    constant = torch.cat([d[:, :2], torch.full((64, 1), 3.0, dtype=DT)], dim=1)
    torch.testing.assert_close(
        obj.log_det_penalty(constant, eps=1e-4),
        -torch.logdet(torch.cov(constant.T) + 1e-4 * torch.eye(3, dtype=DT)),
    )
    assert obj.log_det_penalty(constant) > obj.log_det_penalty(d) + 5
    with pytest.raises(ValueError, match="B >= 2"):
        obj.log_det_penalty(d[:1])


def test_every_objective_passes_gradcheck():
    d = _rand(5, 4, 3).requires_grad_(True)
    y = torch.tensor([0, 2, 1, 2])
    t = torch.softmax(_rand(6, 4, 3), -1)
    log_det = _rand(7, 3, scale=0.3).requires_grad_(True)
    d0 = torch.tensor(0.3, dtype=DT, requires_grad=True)
    checks = [
        (lambda x, v: obj.mixture_nll(x, log_det=v, reduction="none"), (d, log_det)),
        (lambda x: obj.cross_entropy(x, y, label_smoothing=0.2, reduction="none"), (d,)),
        (lambda x: obj.cross_entropy(x, t, reduction="none"), (d,)),
        (lambda x, z: obj.mixture_nll(obj.append_null(x, z), reduction="none"), (d, d0)),
        (lambda x, z: obj.null_responsibility(x, z), (d, d0)),
        (lambda x: obj.correntropy(x, 1.3, reduction="none"), (d,)),
        (lambda x: obj.sigmoid_bce(x, y, bias=0.2, reduction="none"), (d,)),
        (lambda x: obj.variance_penalty(x), (d,)),
        (lambda x: obj.decorrelation_penalty(x), (d,)),
        (lambda x: obj.log_det_penalty(x.reshape(-1, 3)), (d,)),
    ]
    for fn, inputs in checks:
        assert torch.autograd.gradcheck(fn, inputs)

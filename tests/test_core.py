"""Property tests of the functional core: lse and responsibilities."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import implicit_em as iem
from implicit_em.core import log_responsibilities

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INF = float("inf")


@st.composite
def distances(draw, max_dims: int = 3, magnitude: float = 50.0):
    """A float64 tensor of random shape (each axis 1..5) with entries in [-magnitude, magnitude]."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=max_dims))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.floats(1e-3, magnitude))
    gen = torch.Generator().manual_seed(seed)
    return scale * (2 * torch.rand(*shape, generator=gen, dtype=torch.float64) - 1)


@settings(max_examples=60, deadline=None)
@given(d=distances(), data=st.data())
def test_lse_matches_definition_and_gradient_is_minus_r(d, data):
    dim = data.draw(st.integers(-d.dim(), d.dim() - 1))
    d = d.requires_grad_(True)
    value = iem.lse(d, dim=dim)
    expected = torch.log(torch.exp(-d.detach()).sum(dim=dim))
    torch.testing.assert_close(value.detach(), expected, rtol=1e-12, atol=1e-12)
    (grad,) = torch.autograd.grad(value.sum(), d)
    torch.testing.assert_close(grad, -iem.responsibilities(d.detach(), dim=dim), rtol=0, atol=1e-14)


@settings(max_examples=60, deadline=None)
@given(d=distances(), data=st.data())
def test_responsibilities_are_a_distribution(d, data):
    dim = data.draw(st.integers(-d.dim(), d.dim() - 1))
    r = iem.responsibilities(d, dim=dim)
    assert r.shape == d.shape
    assert bool((r >= 0).all())
    torch.testing.assert_close(r.sum(dim=dim), torch.ones_like(r.sum(dim=dim)), atol=1e-12, rtol=0)
    torch.testing.assert_close(log_responsibilities(d, dim=dim).exp(), r, atol=1e-12, rtol=0)


@settings(max_examples=40, deadline=None)
@given(d=distances(max_dims=2), seed=st.integers(0, 1000))
def test_log_prior_shifts_logits(d, seed):
    k = d.shape[-1]
    gen = torch.Generator().manual_seed(seed)
    log_prior = torch.log_softmax(torch.randn(k, generator=gen, dtype=torch.float64), dim=-1)
    r = iem.responsibilities(d, log_prior=log_prior)
    expected = torch.softmax(-d + log_prior, dim=-1)
    torch.testing.assert_close(r, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        iem.lse(d, log_prior=log_prior), torch.logsumexp(-d + log_prior, -1), atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("magnitude", [1e3, 1e10, 1e20, 1e30])
def test_extreme_magnitudes_stay_finite(dtype, magnitude):
    gen = torch.Generator().manual_seed(0)
    d = (magnitude * (2 * torch.rand(7, 5, generator=gen) - 1)).to(dtype).requires_grad_(True)
    value = iem.lse(d)
    (grad,) = torch.autograd.grad(value.sum(), d)
    r = iem.responsibilities(d)
    assert torch.isfinite(value).all() and torch.isfinite(grad).all() and torch.isfinite(r).all()
    torch.testing.assert_close(r.sum(-1), torch.ones(7, dtype=dtype))
    # The largest logit dominates: L = -min d up to log K.
    assert bool(((value + d.detach().min(-1).values).abs() <= math.log(5) + 1e-6 * magnitude).all())


@pytest.mark.parametrize("dtype", FLOATS)
def test_every_float_dtype_is_supported_and_preserved(dtype):
    gen = torch.Generator().manual_seed(1)
    d64 = 10 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    d = d64.to(dtype).requires_grad_(True)
    value = iem.lse(d)
    r = iem.responsibilities(d)
    (grad,) = torch.autograd.grad(value.sum(), d)
    assert value.dtype == dtype and r.dtype == dtype and grad.dtype == dtype
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-6)
    exact = torch.softmax(-d.detach().double(), -1)
    torch.testing.assert_close(r.double(), exact, atol=tol, rtol=0)
    torch.testing.assert_close(grad.double(), -exact, atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_at_its_largest_values(dtype):
    big = torch.finfo(dtype).max
    d = torch.tensor([[big, -big, 0.0], [big, big, big]], dtype=dtype).requires_grad_(True)
    value = iem.lse(d)
    (grad,) = torch.autograd.grad(value.sum(), d)
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()
    assert torch.isfinite(iem.responsibilities(d)).all()


@pytest.mark.parametrize("dtype", FLOATS)
def test_infinite_distance_excludes_the_component(dtype):
    d = torch.tensor([[1.0, INF, 2.0], [INF, 0.5, INF]], dtype=dtype).requires_grad_(True)
    r = iem.responsibilities(d)
    assert r[0, 1] == 0 and r[1, 0] == 0 and r[1, 2] == 0 and r[1, 1] == 1
    finite = torch.tensor([1.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(r[0, [0, 2]].double(), torch.softmax(-finite, 0), atol=1e-2, rtol=0)
    (grad,) = torch.autograd.grad(iem.lse(d).sum(), d)
    assert torch.isfinite(grad).all()
    assert grad[0, 1] == 0 and grad[1, 0] == 0


def test_all_components_excluded_is_empty_mixture():
    d = torch.tensor([[INF, INF], [1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    value = iem.lse(d)
    assert value[0] == -INF and torch.isfinite(value[1])
    (grad,) = torch.autograd.grad(value[1] + value[0].clamp(min=-1e300), d)
    assert torch.equal(grad[0], torch.zeros(2, dtype=torch.float64))
    r = iem.responsibilities(d)
    assert torch.equal(r[0], torch.zeros(2, dtype=torch.float64))
    assert torch.equal(log_responsibilities(d)[0], torch.full((2,), -INF, dtype=torch.float64))


def test_nan_stays_in_its_row():
    d = torch.tensor([[float("nan"), 1.0], [1.0, 2.0], [0.5, 0.25]], requires_grad=True)
    value = iem.lse(d)
    assert torch.isnan(value[0]) and torch.isfinite(value[1:]).all()
    r = iem.responsibilities(d)
    assert torch.isnan(r[0]).all() and torch.isfinite(r[1:]).all()
    (grad,) = torch.autograd.grad(value.sum(), d)
    assert torch.isnan(grad[0]).all() and torch.isfinite(grad[1:]).all()


def test_second_order_gradients_exist():
    d = torch.randn(5, dtype=torch.float64, requires_grad=True)
    hessian = torch.autograd.functional.hessian(iem.lse, d)
    r = iem.responsibilities(d)
    torch.testing.assert_close(hessian, torch.diag(r) - torch.outer(r, r), atol=1e-14, rtol=0)
    assert torch.autograd.gradgradcheck(iem.lse, (d,))
    assert torch.autograd.gradcheck(lambda x: iem.responsibilities(x), (d,))


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (torch.tensor([1, 2, 3]), TypeError, "floating"),
        (torch.tensor(1.0), ValueError, "at least one dimension"),
        (torch.empty(3, 0), ValueError, "empty component axis"),
        ([1.0, 2.0], TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_names_the_argument(bad, error, match):
    with pytest.raises(error, match=match):
        iem.lse(bad)
    with pytest.raises(error, match=match):
        iem.responsibilities(bad)


def test_bad_dim_and_log_prior():
    d = torch.randn(3, 4)
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        iem.lse(d, dim=2)
    with pytest.raises(ValueError, match="log_prior"):
        iem.responsibilities(d, log_prior=torch.zeros(5))
    with pytest.raises(ValueError, match="log_prior"):
        iem.responsibilities(d, log_prior=torch.zeros(2, 3, 4))
    with pytest.raises(TypeError, match="log_prior"):
        iem.responsibilities(d, log_prior=torch.zeros(4, dtype=torch.long))

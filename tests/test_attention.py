"""Attention: equality with PyTorch's SDPA and the exact gradient decomposition."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

import implicit_em as iem
from implicit_em.attention import attention, attention_gradients

DT = torch.float64


def _qkv(seed: int, lq: int, lk: int, e: int, ev: int, dtype=DT):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(2, 3, lq, e, generator=gen, dtype=dtype),
        torch.randn(2, 3, lk, e, generator=gen, dtype=dtype),
        torch.randn(2, 3, lk, ev, generator=gen, dtype=dtype),
    )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    lq=st.integers(1, 6),
    lk=st.integers(1, 6),
    e=st.integers(1, 8),
    ev=st.integers(1, 5),
    causal=st.booleans(),
)
def test_matches_sdpa_math_path(seed, lq, lk, e, ev, causal):
    q, k, v = _qkv(seed, lq, lk, e, ev)
    out, alpha = attention(q, k, v, is_causal=causal)
    with sdpa_kernel(SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    assert alpha.shape == (2, 3, lq, lk)
    torch.testing.assert_close(alpha.sum(-1), torch.ones(2, 3, lq, dtype=DT))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masks_match_sdpa(dtype):
    q, k, v = _qkv(0, 4, 5, 8, 3, dtype)
    bool_mask = torch.rand(4, 5, generator=torch.Generator().manual_seed(1)) > 0.3
    bool_mask[:, 0] = True  # no fully masked rows: SDPA gives NaN there
    float_mask = torch.randn(4, 5, dtype=dtype)
    for mask in (bool_mask, float_mask):
        out, alpha = attention(q, k, v, mask=mask)
        with sdpa_kernel(SDPBackend.MATH):
            expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(out, expected)
    out, alpha = attention(q, k, v, mask=bool_mask)
    assert bool((alpha[..., ~bool_mask] == 0).all())


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = _qkv(0, 3, 4, 2, 2)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out, alpha = attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all()
    assert bool((alpha[..., 1, :] == 0).all()) and bool((out[..., 1, :] == 0).all())


def test_alpha_is_the_responsibility_of_the_keys():
    q, k, v = _qkv(3, 4, 6, 5, 2)
    _, alpha = attention(q, k, v)
    torch.testing.assert_close(alpha, iem.responsibilities(iem.distances.dot_product_energy(q, k)))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), causal=st.booleans(), scale=st.sampled_from([None, 0.5]))
def test_gradient_decomposition_equals_autograd(seed, causal, scale):
    q, k, v = _qkv(seed, 5, 5, 4, 3)
    g = torch.randn(2, 3, 5, 3, generator=torch.Generator().manual_seed(seed + 1), dtype=DT)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out, _ = attention(*leaves, is_causal=causal, scale=scale)
    grad_q, grad_k, grad_v = torch.autograd.grad((out * g).sum(), leaves)
    closed = attention_gradients(q, k, v, g, is_causal=causal, scale=scale)
    torch.testing.assert_close(closed.values, grad_v, atol=1e-12, rtol=0)
    torch.testing.assert_close(closed.queries, grad_q, atol=1e-12, rtol=0)
    torch.testing.assert_close(closed.keys, grad_k, atol=1e-12, rtol=0)
    # The advantage of each query averages to zero under its own attention weights.
    torch.testing.assert_close(
        (closed.alpha * closed.advantage).sum(-1),
        torch.zeros(2, 3, 5, dtype=DT),
        atol=1e-12,
        rtol=0,
    )


def test_gradcheck_through_attention():
    q, k, v = _qkv(7, 3, 4, 2, 2)
    leaves = tuple(t.requires_grad_(True) for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: attention(a, b, c, is_causal=True)[0], leaves)


@pytest.mark.parametrize(
    ("q", "k", "v", "error", "match"),
    [
        (torch.randn(3, 4), torch.randn(5, 3), torch.randn(5, 2), ValueError, "last"),
        (torch.randn(3, 4), torch.randn(5, 4), torch.randn(6, 2), ValueError, "number of keys"),
        (torch.randn(4), torch.randn(5, 4), torch.randn(5, 2), ValueError, r"\[\.\.\., L, E\]"),
        (torch.ones(3, 4, dtype=torch.long), torch.randn(5, 4), torch.randn(5, 2), TypeError, "q"),
    ],
)
def test_bad_input(q, k, v, error, match):
    with pytest.raises(error, match=match):
        attention(q, k, v)


def test_bad_mask_and_grad_output():
    q, k, v = _qkv(0, 3, 4, 2, 2)
    with pytest.raises(ValueError, match="mask"):
        attention(q, k, v, mask=torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="grad_output"):
        attention_gradients(q, k, v, torch.zeros(2, 3, 3, 5, dtype=DT))

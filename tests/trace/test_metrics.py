"""Properties of the streaming metrics (pure functions)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em.attention import attention_scores
from implicit_em.trace.attention_metrics import attention_stats_steps, finish_attention
from implicit_em.trace.metrics import (
    Targets,
    along,
    entropy,
    finish_responsibility,
    log_partition,
    read_responsibilities,
    residual_tolerance,
    responsibility_stats_steps,
)
from implicit_em.trace.sites.attention import (
    attention_weights,
    causal_scores,
    head_max,
    shifted_scores_entropy,
    weights_entropy_logit_max,
)

shapes = st.tuples(st.integers(1, 16), st.integers(2, 9))


def responsibility_stats(r, valid, target, logits):
    """The statistics of one measurement (`responsibility_stats_steps` with S = 1)."""
    right = None if target is None else target.argmax(-1).unsqueeze(0)
    r = torch.where(valid.unsqueeze(-1), r, 0.0).unsqueeze(0)
    stats = responsibility_stats_steps(r, valid.unsqueeze(0), right, logits.unsqueeze(0))
    return {key: value[0] for key, value in stats.items()}


@settings(max_examples=40, deadline=None)
@given(shape=shapes, seed=st.integers(0, 10_000), scale=st.floats(0.1, 20.0))
def test_cross_entropy_gradient_reads_the_softmax(shape, seed, scale):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).requires_grad_()
    y = torch.randint(0, shape[1], (shape[0],), generator=g)
    F.cross_entropy(z, y).backward()
    c = torch.full((shape[0],), 1.0 / shape[0], dtype=torch.float64)
    r = read_responsibilities(z.grad, c, F.one_hot(y, shape[1]).double(), 1.0)
    torch.testing.assert_close(r, torch.softmax(z.detach(), -1), atol=1e-12, rtol=0)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, seed=st.integers(0, 10_000))
def test_distribution_metrics_are_bounded(shape, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, generator=g, dtype=torch.float64) * 3
    r = torch.softmax(logits, -1)
    target = F.one_hot(torch.randint(0, shape[1], (shape[0],), generator=g), shape[1]).double()
    stats = responsibility_stats(r, torch.ones(shape[0], dtype=torch.bool), target, logits)
    m = finish_responsibility(stats, dead_fraction=0.01)
    k = shape[1]
    assert math.isclose(float(m["mass"].sum()), 1.0, rel_tol=1e-9)
    assert 1.0 - 1e-9 <= float(m["effective_k"]) <= k + 1e-9
    assert 0.0 <= float(m["entropy"]) <= math.log(k) + 1e-9
    assert 1.0 / k - 1e-12 <= float(m["dominance"]) <= 1.0
    assert 0.0 <= float(m["wrong_entropy"]) <= math.log(k - 1) + 1e-9
    assert 1.0 / (k - 1) - 1e-9 <= float(m["wrong_top"]) <= 1.0 + 1e-12


def test_dead_and_dominant_components():
    r = torch.tensor([[0.98, 0.02, 0.0], [0.99, 0.01, 0.0]], dtype=torch.float64)
    stats = responsibility_stats(r, torch.ones(2, dtype=torch.bool), None, r.log())
    m = finish_responsibility(stats, dead_fraction=0.01)
    assert float(m["dead"]) == 1.0
    assert math.isclose(float(m["dominance"]), 0.985)


def test_invalid_rows_do_not_count():
    r = torch.tensor([[0.5, 0.5], [float("nan"), 1.0]], dtype=torch.float64)
    stats = responsibility_stats(r, torch.tensor([True, False]), None, torch.zeros(2, 2))
    assert float(stats["n"]) == 1.0
    torch.testing.assert_close(stats["mass"], torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_entropy_of_uniform_and_one_hot():
    assert math.isclose(float(entropy(torch.full((4,), 0.25))), math.log(4), rel_tol=1e-6)
    assert float(entropy(torch.tensor([1.0, 0.0, 0.0]))) == 0.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), lq=st.integers(1, 6), lk=st.integers(1, 6))
def test_attention_norms_match_autograd(seed, lq, lk):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(2, 3, lq, lk, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 3, lk, 4, generator=g, dtype=torch.float64, requires_grad=True)
    alpha = torch.softmax(s, -1)
    o = alpha @ v
    w = torch.randn(o.shape, generator=g, dtype=torch.float64)
    gs, gv, go = torch.autograd.grad((o * w).sum(), (s, v, o))
    stats = attention_stats_steps(
        *(t[None] for t in (alpha.detach(), v.detach(), go)), grad_v=gv[None]
    )
    m = {key: value[0] for key, value in finish_attention(stats).items()}
    assert math.isclose(float(m["routing_norm"]), float(gs.norm()), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(float(m["value_norm"]), float(gv.norm()), rel_tol=1e-9, abs_tol=1e-12)
    assert float(m["value_residual"]) < 1e-12
    assert 0.0 <= float(m["entropy"]) <= math.log(lk) + 1e-9


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    lq=st.integers(1, 6),
    lk=st.integers(1, 6),
    shared=st.sampled_from([0.0, 1e-3, 1.0]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_value_update_read_from_autograd_matches_the_product(seed, lq, lk, shared, dtype):
    """With autograd's dL/dv and a tolerance, `value_sq` is |dL/dv|^2 while the identity
    holds along u, and the product alpha^T g once it does not (dL/dv shared with another
    loss); the residual is the identity along u either way, and `grad_alpha` is not written."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(2, 1, 3, lq, lk, generator=g, dtype=dtype)
    alpha = torch.softmax(s, -1)
    v = torch.randn(2, 1, 3, lk, 4, generator=g, dtype=dtype)
    go = torch.randn(2, 1, 3, lq, 4, generator=g, dtype=dtype)
    product = alpha.transpose(-2, -1) @ go
    grad_v = product + shared * torch.randn(product.shape, generator=g, dtype=dtype)
    tolerance = residual_tolerance(dtype, 2, torch.device("cpu"))
    grad_alpha = go @ v.transpose(-2, -1)
    kept = grad_alpha.clone()
    fast = attention_stats_steps(alpha, v, go, grad_alpha, grad_v=grad_v, tolerance=tolerance)
    reference = attention_stats_steps(alpha, v, go, grad_v=grad_v)
    assert torch.equal(grad_alpha, kept)
    torch.testing.assert_close(fast["routing_sq"], reference["routing_sq"])
    seen = along(grad_v)
    residual = (along(product) - seen).abs().amax((1, 2, 3))
    torch.testing.assert_close(fast["value_residual_max"], residual.double(), atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(fast["grad_v_max"], seen.abs().amax((1, 2, 3)).double())
    within = bool((fast["value_residual_max"] <= tolerance * fast["grad_v_max"]).all())
    if within:
        expected = grad_v.square().sum((1, 2, 3, 4)).double()
        torch.testing.assert_close(fast["value_sq"], expected, rtol=1e-5, atol=0)
        torch.testing.assert_close(fast["value_sq"], reference["value_sq"], rtol=1e-3, atol=0)
    else:
        assert torch.equal(fast["value_sq"], reference["value_sq"])
    if shared == 0.0:
        assert within
    if shared == 1.0:
        assert not within


def test_attention_stats_set_nonfinite_gradients_aside_per_step():
    gen = torch.Generator().manual_seed(0)
    s, r, h, length, e = 3, 2, 2, 5, 4
    alpha = torch.softmax(torch.randn(s, r, h, length, length, generator=gen), dim=-1)
    v = torch.randn(s, r, h, length, e, generator=gen)
    g = torch.randn(s, r, h, length, e, generator=gen)
    clean = attention_stats_steps(alpha, v, g)
    bad_g = g.clone()
    bad_g[1, 0, 0, 2, 1] = float("nan")
    bad = attention_stats_steps(alpha, v, bad_g)
    assert clean["nonfinite"].tolist() == [0.0, 0.0, 0.0]
    assert bad["nonfinite"][1] > 0 and bad["nonfinite"][0] == 0 and bad["nonfinite"][2] == 0
    for key in ("routing_sq", "value_sq", "entropy"):
        assert torch.isfinite(bad[key]).all()
        assert torch.allclose(bad[key][[0, 2]], clean[key][[0, 2]])


@settings(max_examples=40, deadline=None)
@given(
    shape=shapes,
    seed=st.integers(0, 10_000),
    smoothing=st.sampled_from([0.0, 0.1, 0.45]),
    soft=st.booleans(),
    weighted=st.booleans(),
)
def test_targets_read_the_softmax_from_any_cross_entropy(shape, seed, smoothing, soft, weighted):
    """With class weights, label smoothing and soft or hard targets, F.cross_entropy's row
    gradient is c_i a_i (p_i - t_i) for the row weight a_i and target t_i of `Targets`."""
    n, k = shape
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, k, generator=g, dtype=torch.float64) * 3).requires_grad_()
    weight = torch.rand(k, generator=g, dtype=torch.float64) + 0.2 if weighted else None
    if soft:
        target = torch.softmax(torch.randn(n, k, generator=g, dtype=torch.float64), -1)
        targets = Targets(dense=target, smoothing=smoothing, class_weight=weight)
    else:
        target = torch.randint(0, k, (n,), generator=g)
        targets = Targets(labels=target, smoothing=smoothing, class_weight=weight)
    F.cross_entropy(z, target, weight=weight, label_smoothing=smoothing, reduction="sum").backward()
    a = targets.row_weight(z.detach())
    c = torch.ones(n, dtype=torch.float64) if a is None else a
    r = read_responsibilities(z.grad, c, targets, 1.0)
    torch.testing.assert_close(r, torch.softmax(z.detach(), -1), atol=1e-12, rtol=0)
    assert bool((targets.right() == target.argmax(-1) if soft else targets.right() == target).all())


@settings(max_examples=30, deadline=None)
@given(shape=shapes, seed=st.integers(0, 10_000), scale=st.floats(0.1, 30.0))
def test_log_partition_from_the_softmax_is_the_logsumexp(shape, seed, scale):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(*shape, generator=g) * scale
    expected = torch.logsumexp(z, -1)
    got = log_partition(z, torch.softmax(z, -1))
    assert torch.allclose(got, expected, rtol=1e-6, atol=1e-5)
    z[0, 0] = math.nan
    assert not torch.isfinite(log_partition(z, torch.softmax(z, -1))[0])


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    lq=st.integers(1, 9),
    extra=st.integers(0, 3),
    causal=st.booleans(),
    scale=st.sampled_from([0.01, 1.0, 3.0, 30.0, 300.0]),
)
def test_fast_path_matches_the_masked_weights(seed, lq, extra, causal, scale):
    """The weights, the per-head entropy sums from the shifted scores and the head maxima
    agree with the masked scores' softmax, its entropy and `head_max`, also at large scores."""
    g = torch.Generator().manual_seed(seed)
    lk = lq + extra
    q = torch.randn(2, 1, 3, lq, 4, generator=g) * scale
    k = torch.randn(2, 1, 3, lk, 4, generator=g)
    s = attention_scores(q.double(), k.double(), is_causal=causal)
    alpha, head_entropy, logit_max = weights_entropy_logit_max(q, k, None, causal, None)
    assert head_entropy is not None and head_entropy.dtype == torch.float64
    reference = torch.softmax(s, -1)
    # float32 scores carry a rounding error up to about delta; a weight then moves by at most
    # delta / 2 and a row's entropy by at most delta (2 + log Lk)
    delta = 8 * torch.finfo(torch.float32).eps * float(s[torch.isfinite(s)].abs().max())
    assert torch.allclose(alpha.double(), reference, atol=1e-6 + delta / 2)
    torch.testing.assert_close(logit_max, head_max(s), rtol=1e-6, atol=1e-6 * scale)
    expected = entropy(reference).sum((1, 3))
    row_atol = 1e-5 + delta * (2 + math.log(lk))
    assert torch.allclose(head_entropy, expected, rtol=1e-5, atol=row_atol * lq)
    assert bool((head_entropy >= 0).all())
    if causal:
        assert torch.equal(causal_scores(q, k, None) > -1e30, torch.isfinite(s))


def test_shifted_scores_entropy_is_the_entropy_of_the_weights():
    t = torch.tensor([[0.0, -1.0, -2.0], [0.0, 0.0, -torch.finfo(torch.float32).max]])
    alpha = torch.softmax(t, -1)
    got = shifted_scores_entropy(alpha[None, None, None], t[None, None, None].clone())
    assert math.isclose(float(got.squeeze()), float(entropy(alpha).sum()), rel_tol=1e-6)
    t[0, 1] = -math.inf
    bad = shifted_scores_entropy(torch.softmax(t, -1)[None, None, None], t[None, None, None])
    assert not torch.isfinite(bad).any()


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_nonfinite_scores_take_the_careful_path(value):
    q, k = torch.randn(1, 1, 2, 5, 4), torch.randn(1, 1, 2, 5, 4)
    q[0, 0, 1, 2, 0] = value
    alpha, head_entropy, logit_max = weights_entropy_logit_max(q, k, None, True, None)
    s = attention_scores(q, k, is_causal=True)
    assert head_entropy is None
    assert torch.equal(logit_max, head_max(s))
    expected = attention_weights(q, k, None, True, None)
    torch.testing.assert_close(alpha, expected, rtol=0, atol=0, equal_nan=True)
    assert torch.isfinite(logit_max[0, 0])

"""Distance layers: definitions, shapes, volume terms, gradcheck."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em import distances as dist
from implicit_em.objectives import mixture_nll

DT = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), batch=st.lists(st.integers(1, 4), max_size=2))
def test_squared_euclidean_is_exact_and_nonnegative(seed, batch):
    x = torch.randn(*batch, 3, generator=_gen(seed), dtype=DT)
    layer = dist.SquaredEuclidean(3, 4).double()
    d = layer(x)
    assert d.shape == (*batch, 4)
    expected = ((x.unsqueeze(-2) - layer.prototypes) ** 2).sum(-1)
    torch.testing.assert_close(d, expected)
    assert bool((d >= 0).all())
    far = 1e8 + x
    assert bool((dist.squared_euclidean(far, far.reshape(-1, 3)[:1]) >= 0).all())


def test_diagonal_mahalanobis_matches_gaussian_density():
    torch.manual_seed(0)
    layer = dist.DiagonalMahalanobis(3, 2).double()
    with torch.no_grad():
        layer.log_scales.normal_(0, 0.3)
    x = torch.randn(5, 3, dtype=DT)
    log_density = -layer(x) + layer.log_det() - 1.5 * math.log(2 * math.pi)
    for j in range(2):
        std = torch.exp(-layer.log_scales[j].detach())
        normal = torch.distributions.Normal(layer.means[j].detach(), std)
        torch.testing.assert_close(log_density[:, j].detach(), normal.log_prob(x).sum(-1))


def test_full_mahalanobis_matches_multivariate_normal():
    torch.manual_seed(1)
    layer = dist.FullMahalanobis(3, 2).double()
    with torch.no_grad():
        layer.raw_factors.normal_(0, 0.3)
    w = layer.factors().detach()
    assert torch.equal(w, torch.tril(w)) and bool((torch.diagonal(w, dim1=-2, dim2=-1) > 0).all())
    torch.testing.assert_close(layer.log_det().detach(), torch.linalg.slogdet(w).logabsdet)
    x = torch.randn(6, 3, dtype=DT)
    log_density = -layer(x) + layer.log_det() - 1.5 * math.log(2 * math.pi)
    for j in range(2):
        precision = w[j].T @ w[j]
        mvn = torch.distributions.MultivariateNormal(
            layer.means[j].detach(), precision_matrix=precision
        )
        torch.testing.assert_close(log_density[:, j].detach(), mvn.log_prob(x))
    # With the volume term the mixture NLL is the Gaussian mixture NLL up to (D/2) log 2 pi.
    nll = mixture_nll(layer(x), log_det=layer.log_det(), reduction="none")
    gmm = torch.logsumexp(log_density.detach() - math.log(1.0), -1)
    torch.testing.assert_close(-nll.detach() - 1.5 * math.log(2 * math.pi), gmm)


def test_affine_distance_and_relu_variant():
    torch.manual_seed(2)
    layer = dist.AffineDistance(4, 3).double()
    x = torch.randn(5, 4, dtype=DT)
    y = x @ layer.weight.T + layer.bias
    torch.testing.assert_close(layer(x), y.abs())
    relu = dist.AffineDistance(4, 3, relu=True).double()
    y = x @ relu.weight.T + relu.bias
    torch.testing.assert_close(relu(x), y.clamp(min=0))


def test_dot_product_energy_is_negative_scaled_score():
    q = torch.randn(2, 5, 8, dtype=DT)
    k = torch.randn(2, 7, 8, dtype=DT)
    d = dist.DotProductEnergy()(q, k)
    assert d.shape == (2, 5, 7)
    torch.testing.assert_close(d, -(q @ k.transpose(-2, -1)) / math.sqrt(8))
    torch.testing.assert_close(dist.dot_product_energy(q, k, scale=1.0), -(q @ k.transpose(-2, -1)))


def test_every_layer_passes_gradcheck():
    torch.manual_seed(3)
    x = torch.randn(3, 2, dtype=DT, requires_grad=True)
    layers = [
        dist.SquaredEuclidean(2, 3),
        dist.DiagonalMahalanobis(2, 3),
        dist.FullMahalanobis(2, 3),
        dist.AffineDistance(2, 3),
        dist.AffineDistance(2, 3, relu=True),
    ]
    for layer in layers:
        layer = layer.double()
        params = tuple(layer.parameters())

        def run(inp, *ps, layer=layer, params=params):
            return torch.func.functional_call(
                layer,
                {n: p for (n, _), p in zip(layer.named_parameters(), ps, strict=True)},
                (inp,),
            )

        assert torch.autograd.gradcheck(run, (x, *params)), type(layer).__name__
    q = torch.randn(2, 3, dtype=DT, requires_grad=True)
    k = torch.randn(4, 3, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(dist.dot_product_energy, (q, k))


@pytest.mark.parametrize(
    ("make", "x", "error", "match"),
    [
        (lambda: dist.SquaredEuclidean(3, 2), torch.randn(4, 2), ValueError, r"\[\.\.\., 3\]"),
        (
            lambda: dist.FullMahalanobis(3, 2),
            torch.ones(4, 3, dtype=torch.long),
            TypeError,
            "floating",
        ),
        (lambda: dist.AffineDistance(3, 2), "x", TypeError, "torch.Tensor"),
    ],
)
def test_bad_input(make, x, error, match):
    with pytest.raises(error, match=match):
        make()(x)


@pytest.mark.parametrize(
    "cls", [dist.SquaredEuclidean, dist.DiagonalMahalanobis, dist.AffineDistance]
)
def test_bad_sizes(cls):
    with pytest.raises(ValueError, match="n_components"):
        cls(3, 0)
    with pytest.raises(ValueError, match="in_features"):
        cls(-1, 2)

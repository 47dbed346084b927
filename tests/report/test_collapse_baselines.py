"""E6's comparators (PCA, random features) and the encoders of the paper's patches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from implicit_em.report.experiments import _collapse_baselines as cb


def test_pca_features_are_the_leading_projections() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 6, generator=g) * torch.tensor([5.0, 3.0, 1.0, 0.5, 0.2, 0.1])
    f_train, f_test = cb.pca_features(x, x[:10], 2)
    assert f_train.shape == (200, 2) and f_test.shape == (10, 2)
    variances = f_train.var(0)
    assert variances[0] > variances[1] > 1.0
    np.testing.assert_allclose(f_test.numpy(), f_train[:10].numpy())


def test_random_features_are_the_untrained_encoder_of_the_seed() -> None:
    x = torch.randn(20, 5)
    a, _ = cb.random_features(x, x, 4, seed=3)
    b, _ = cb.random_features(x, x, 4, seed=3)
    c, _ = cb.random_features(x, x, 4, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c) and (a >= 0).all()


def test_encoders_and_optimizers() -> None:
    x = torch.randn(8, 5)
    for kind in cb.ENCODERS:
        d = cb.build_encoder(kind, 5, 3)(x)
        assert d.shape == (8, 3) and (d >= 0).all()
    # Without affine parameters each input's pre-activations (LayerNorm) or each unit's over
    # the batch (BatchNorm) have mean 0 and variance 1.
    for kind, dim in (("layernorm_plain", 1), ("batchnorm", 0)):
        encoder = cb.build_encoder(kind, 5, 3)
        z = encoder.norm(encoder.linear(x))
        assert torch.allclose(z.mean(dim), torch.zeros(z.shape[1 - dim]), atol=1e-5)
        assert list(encoder.norm.parameters()) == []
    with pytest.raises(ValueError, match="kind must be"):
        cb.build_encoder("groupnorm", 5, 3)
    params = list(cb.build_encoder("plain", 5, 3).parameters())
    assert isinstance(cb.encoder_optimizer(params, 1e-3, 0.1), torch.optim.AdamW)
    assert type(cb.encoder_optimizer(params, 1e-3)) is torch.optim.Adam
    with pytest.raises(ValueError, match="weight_decay"):
        cb.encoder_optimizer(params, 1e-3, -1.0)

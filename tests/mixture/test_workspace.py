import pytest
import torch

from implicit_em.mixture.workspace import Workspace


def test_take_reuses_one_buffer_per_name():
    workspace = Workspace()
    like = torch.zeros(1)
    first = workspace.take("a", (4, 3), like)
    second = workspace.take("a", (2, 5), like)
    assert first.shape == (4, 3) and second.shape == (2, 5)
    assert first.is_contiguous() and second.is_contiguous()
    assert second.data_ptr() == first.data_ptr()
    assert workspace.take("b", (4, 3), like).data_ptr() != first.data_ptr()


def test_take_grows_and_follows_dtype():
    workspace = Workspace()
    small = workspace.take("a", (2,), torch.zeros(1))
    large = workspace.take("a", (100, 10), torch.zeros(1))
    assert large.numel() == 1000
    large.fill_(1.0)
    assert workspace.take("a", (10,), torch.zeros(1)).sum().item() == 10.0
    double = workspace.take("a", (3,), torch.zeros(1, dtype=torch.float64))
    assert double.dtype == torch.float64
    assert small.shape == (2,)


@pytest.mark.parametrize("covariance_type", ["full", "tied", "diag", "spherical"])
@pytest.mark.parametrize("n_features", [4, 20])
def test_estimator_results_do_not_alias_the_workspace(covariance_type, n_features):
    """Energies, responsibilities and shifted data live in the workspace: what `predict_proba`,
    `score_samples` and `predict` return must be copies (20 features: `full`'s features-last
    residuals)."""
    from implicit_em.mixture import GaussianMixture

    x = torch.randn(
        3000, n_features, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    gm = GaussianMixture(3, covariance_type=covariance_type, batch_size=1000, random_state=0).fit(x)
    proba = gm.predict_proba(x)
    assert torch.allclose(proba.sum(dim=1), torch.ones(3000, dtype=torch.float64))
    assert torch.equal(proba[:1000], gm.predict_proba(x[:1000]))
    assert torch.equal(gm.score_samples(x)[:1000], gm.score_samples(x[:1000]))
    assert torch.equal(gm.predict(x)[:1000], gm.predict(x[:1000]))

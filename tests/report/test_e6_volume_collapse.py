"""E6: the encoder objectives, the feature statistics, a smoke run and the verdict rule."""

from __future__ import annotations

import math

import pytest
import torch

from implicit_em import data
from implicit_em.objectives import (
    cross_entropy,
    decorrelation_penalty,
    log_det_penalty,
    mixture_nll,
    variance_penalty,
)
from implicit_em.report import select
from implicit_em.report.experiments import _encoders
from implicit_em.report.experiments import e6_volume_collapse as e6
from implicit_em.report.running.runner import run_experiments

(E6,) = select(["E6"])


def test_lse_alone_is_minimized_by_switching_every_unit_off():
    d = torch.rand(64, 8)
    assert mixture_nll(torch.zeros(64, 8)) == pytest.approx(-math.log(8))
    assert mixture_nll(d) > mixture_nll(torch.zeros(64, 8))


def test_encoder_losses():
    torch.manual_seed(0)
    d = torch.rand(32, 6, requires_grad=True)
    config = {"variance_weight": 2.0, "decorrelation_weight": 0.5, "log_det_weight": 3.0}
    volume = 2.0 * variance_penalty(d) + 0.5 * decorrelation_penalty(d)
    assert torch.allclose(_encoders.encoder_loss(d, "lse", config), mixture_nll(d))
    assert torch.allclose(
        _encoders.encoder_loss(d, "lse_var_decor", config), mixture_nll(d) + volume
    )
    assert torch.allclose(
        _encoders.encoder_loss(d, "lse_log_det", config),
        mixture_nll(d) + 3.0 * log_det_penalty(d, _encoders.LOG_DET_EPS),
    )
    for patched in ("layernorm", "layernorm_plain", "batchnorm", "weight_decay"):
        assert torch.allclose(_encoders.encoder_loss(d, patched, config), mixture_nll(d))
    with pytest.raises(ValueError, match="variant"):
        _encoders.encoder_loss(d, "lse_only", config)
    # The supervised prototype classifier: cross-entropy over the head's class distances.
    class_distances = torch.rand(32, 4)
    labels = torch.arange(32) % 4
    ce = cross_entropy(class_distances, labels)
    assert torch.allclose(_encoders.encoder_loss(d, "ce", config, class_distances, labels), ce)
    assert torch.allclose(
        _encoders.encoder_loss(d, "ce_log_det", config, class_distances, labels),
        ce + 3.0 * log_det_penalty(d, _encoders.LOG_DET_EPS),
    )
    with pytest.raises(ValueError, match="needs class_distances"):
        _encoders.encoder_loss(d, "ce", config)


def test_feature_statistics_on_a_hand_made_matrix():
    column = torch.tensor([0.0, 1.0, 0.0, 2.0])
    f = torch.stack([column, column, torch.zeros(4), torch.full((4,), 3.0)], dim=1)
    stats = _encoders.feature_statistics(f)
    assert stats["dead"] == 2  # a zero unit and a constant unit
    assert stats["redundancy"] == pytest.approx(2.0)  # two identical live units: corr 1 twice
    assert stats["mean_sq_corr"] == pytest.approx(1.0)
    assert stats["l0"] == pytest.approx((2 + 2 + 0 + 4) / 16)
    r = torch.softmax(-f.double(), dim=1)
    assert stats["entropy"] == pytest.approx(float(-(r * r.log()).sum(1).mean()))
    cov = torch.cov(f.double().T) + 1e-4 * torch.eye(4, dtype=torch.float64)
    assert stats["log_det"] == pytest.approx(float(torch.logdet(cov)))


def test_smoke_run(tmp_path):
    outcome = E6.run({**E6.configs["smoke"], "device": "cpu"}, tmp_path)
    n = outcome.numbers
    for key in ("dead_lse", "probe_lse_log_det", "alarm_seed_share_lse", "log_det_batchnorm"):
        assert key in n
    assert 0 <= n["dead_fraction_lse"] <= 1 and 0 <= n["probe_lse"] <= 1
    assert isinstance(n["alarms_lse"], list)
    # The tracer reads the LSE term alone: its responsibilities equal softmax(-d).
    assert n["trace_residual_max_lse_log_det"] < 1e-5
    assert all((tmp_path / f.path).is_file() for f in outcome.figures)
    assert len(outcome.tables[0].rows) == len(e6.VARIANTS) + 2  # and PCA, random features
    for name in ("pca", "random", "layernorm_plain", "batchnorm"):
        assert 0 <= n[f"probe_{name}"] <= 1
    assert E6.judge(outcome).verdict not in ("not run", "invalid")
    for criterion in E6.rule.criteria:
        assert len(outcome.samples[criterion.number]) >= len(E6.configs["smoke"]["seeds"])


def test_planted_starts_give_known_dead_fractions():
    config = {**E6.configs["control"], "device": "cpu"}
    assert e6.dead_fractions(e6._planted(config, "lse", "constant")) == [1.0, 1.0]
    assert e6.dead_fractions(e6._planted(config, "batchnorm", "constant")) == [1.0, 1.0]
    assert e6.dead_fractions(e6._planted(config, "layernorm_plain", "spread")) == [0.0, 0.0]
    with pytest.raises(ValueError, match="start must be"):
        e6._planted(config, "lse", "zero")


def test_missing_fashion_mnist_is_not_run_with_instructions(tmp_path, monkeypatch):
    monkeypatch.setenv("IMPLICIT_EM_DATA", str(tmp_path / "empty"))
    monkeypatch.setattr(data, "FASHION_MNIST_SYSTEM_DIR", tmp_path / "not-installed")
    [result] = run_experiments([E6], "full", tmp_path / "out", log=lambda _: None)
    assert result.judgement.verdict == "not run"
    assert "DataNotFoundError" in result.judgement.reason
    assert "make data" in result.judgement.reason

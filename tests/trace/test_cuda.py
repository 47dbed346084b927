"""The tracer on a CUDA device: fused attention kernels and half precision.

Skipped where no CUDA device is present (CI); run on a GPU machine with
``python -m pytest tests/trace/test_cuda.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.objectives import mixture_nll
from implicit_em.trace import Tracer

from .conftest import assert_same_parameters, site_records, small_gpt2, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(32 * 8, 5))
    return model.to(CUDA)


XS = torch.randn(16, 8, 32, generator=torch.Generator().manual_seed(1))
YS = torch.randint(0, 5, (16,), generator=torch.Generator().manual_seed(2))


def _encoder_step(m: nn.Module) -> torch.Tensor:
    return F.cross_entropy(m(XS.to(CUDA)), YS.to(CUDA))


def test_transformer_encoder_on_cuda_reads_gradients_and_leaves_training_unchanged():
    """nn.MultiheadAttention and a classifier on the GPU, with a probe: identities hold and
    training is unchanged."""
    plain, _ = train(_encoder, _encoder_step, 6, None)
    kwargs = {"every": 1, "flush_every": 4, "probe": XS[:4].to(CUDA)}
    traced, tracer = train(_encoder, _encoder_step, 6, kwargs)
    assert_same_parameters(plain, traced)
    assert tracer.history.sites() == ["0.layers.0.self_attn", "0.layers.1.self_attn", "2.ce"]
    for r in site_records(tracer):
        if r["type"] == "attention":
            assert r["alpha_residual"] <= 1e-5 and r["routing_norm"] > 0 and r["value_norm"] > 0
        else:
            assert r["residual"] <= 1e-5 and r["source"] == "gradient"
    steps, drift = tracer.history.series("0.layers.1.self_attn", "attention_drift")
    assert steps == list(range(1, 6)) and all(d >= 0 for d in drift)


pytest.importorskip("transformers")


def _gpt2(dtype: torch.dtype) -> nn.Module:
    return small_gpt2("sdpa", vocab_size=64, n_positions=32, n_embd=64).to(CUDA, dtype)


IDS = torch.randint(0, 64, (8, 32), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize(
    ("dtype", "backend", "tolerance"),
    [
        (torch.float32, "EFFICIENT_ATTENTION", 1e-5),
        (torch.bfloat16, "FLASH_ATTENTION", 2e-2),
    ],
)
def test_gpt2_under_a_fused_sdpa_kernel(dtype, backend, tolerance):
    """Under the memory-efficient (float32) and flash (bfloat16) kernels the weights are
    recomputed from the captured q and k: they rebuild the kernel's output."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ids = IDS.to(CUDA)
    with sdpa_kernel(getattr(SDPBackend, backend)):
        _, tracer = train(
            lambda: _gpt2(dtype), lambda m: m(input_ids=ids, labels=ids).loss, 3, {"every": 1}
        )
    assert tracer.history.sites() == ["lm_head.ce", "transformer.h.0.attn", "transformer.h.1.attn"]
    for r in site_records(tracer):
        if r["type"] == "attention":
            assert r["alpha_residual"] <= tolerance
            assert r["routing_norm"] > 0 and r["value_norm"] > 0
        else:
            assert r["residual"] <= max(tolerance, 1e-5) and r["source"] == "gradient"


def test_mixture_objective_on_cuda():
    torch.manual_seed(4)
    centers = torch.randn(6, 3, device=CUDA, requires_grad=True)
    x = torch.randn(200, 3, device=CUDA)
    with Tracer() as tracer:
        for _ in range(3):
            d = 0.5 * torch.cdist(x, centers).pow(2)
            mixture_nll(d).backward()
            tracer.step()
    r = tracer.history.last("mixture")
    assert r["residual"] <= 1e-5 and r["K"] == 6 and abs(sum(r["mass"]) - 1.0) < 1e-5

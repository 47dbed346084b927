"""Attention sites: nn.MultiheadAttention, nn.TransformerEncoder, Hugging Face GPT-2 and BERT."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.attention import attention
from implicit_em.trace import Tracer

from .conftest import assert_same_parameters, small_gpt2, train

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def _assert_head_entropy(record: dict, weights: torch.Tensor) -> None:
    """The record's per-head entropy is that of the module's own weights ``[R, H, Lq, Lk]``
    (the weights the tracer recomputed are the module's)."""
    w = weights.detach().double()
    per_head = torch.special.entr(w).sum(-1).mean((0, 2))
    got = torch.tensor(record["head_entropy"], dtype=torch.float64)
    torch.testing.assert_close(got, per_head, atol=1e-5, rtol=0)


def test_multihead_attention_weights_match_the_module():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(12, 3, batch_first=True)
    x = torch.randn(5, 7, 12)
    mask = torch.rand(5, 7) < 0.2
    mask[:, 0] = False
    with Tracer(mha, max_rows=2) as tracer:
        out, weights = mha(x, x, x, key_padding_mask=mask, average_attn_weights=False)
        out.pow(2).sum().backward()
        tracer.step()
    r = tracer.history.last("attention")
    _assert_head_entropy(r, weights[:2])
    assert r["alpha_residual"] <= 1e-5
    assert r["routing_norm"] > 0 and r["value_norm"] > 0
    assert len(r["head_entropy"]) == 3


@pytest.mark.parametrize("batch_first", [True, False])
def test_cross_attention_with_own_key_dims_matches_the_module(batch_first):
    """Separate q/k/v projections (kdim, vdim), a key sequence of another length, either
    layout."""
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(12, 3, kdim=5, vdim=7, batch_first=batch_first)
    q, k, v = torch.randn(4, 6, 12), torch.randn(4, 9, 5), torch.randn(4, 9, 7)
    if not batch_first:
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    with Tracer(mha, max_rows=2) as tracer:
        out, weights = mha(q, k, v, average_attn_weights=False)
        out.pow(2).sum().backward()
        tracer.step()
    r = tracer.history.last("attention")
    _assert_head_entropy(r, weights[:2])
    assert r["alpha_residual"] <= 1e-5 and r["routing_norm"] > 0


def test_multihead_attention_gradients_match_autograd():
    """Routing gradient and value update of ``nn.MultiheadAttention`` (read through the output
    projection) equal autograd's gradients of the scores and of the per-head values."""
    torch.manual_seed(1)
    e, h, rows = 12, 3, 2
    mha = nn.MultiheadAttention(e, h, batch_first=True)
    x = torch.randn(4, 6, e)
    with Tracer(mha, max_rows=rows) as tracer:
        out, _ = mha(x, x, x, need_weights=False)
        out.pow(2).sum().backward()
        tracer.step()
    r = tracer.history.last("attention")

    q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(4, 6, h, e // h).transpose(1, 2)

    scores = (heads(q) @ heads(k).transpose(-2, -1) / (e // h) ** 0.5).detach().requires_grad_()
    values = heads(v).detach().requires_grad_()
    o = (torch.softmax(scores, dim=-1) @ values).transpose(1, 2).reshape(4, 6, e)
    F.linear(o, mha.out_proj.weight, mha.out_proj.bias).pow(2).sum().backward()
    torch.testing.assert_close(
        r["routing_norm"], scores.grad[:rows].norm().item(), rtol=1e-5, atol=0
    )
    torch.testing.assert_close(r["value_norm"], values.grad[:rows].norm().item(), rtol=1e-5, atol=0)


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(16 * 6, 3))


XS, YS = torch.randn(8, 6, 16), torch.randint(0, 3, (8,))


def test_transformer_encoder_training_unchanged_and_two_timescales():
    plain, _ = train(_encoder, lambda m: F.cross_entropy(m(XS), YS), 4, None)
    traced, tracer = train(
        _encoder, lambda m: F.cross_entropy(m(XS), YS), 4, {"probe": XS[:3], "max_rows": 3}
    )
    assert_same_parameters(plain, traced)
    assert tracer.history.sites() == ["0.layers.0.self_attn", "0.layers.1.self_attn", "2.ce"]
    for site in ("0.layers.0.self_attn", "0.layers.1.self_attn"):
        steps, drift = tracer.history.series(site, "attention_drift")
        _, vdrift = tracer.history.series(site, "value_drift")
        assert steps == [1, 2, 3] and all(d >= 0 for d in drift) and all(v > 0 for v in vdrift)
        assert all(r <= 1e-5 for r in tracer.history.series(site, "alpha_residual")[1])
    assert all(r <= 1e-5 for r in tracer.history.series("2.ce", "residual")[1])


def test_attention_dropout_shows_in_the_forward_residual():
    """Recomputed weights are those before dropout, so with attention dropout they do not
    rebuild the output: the forward residual (along a random direction) says so, on every
    measurement, in both the discovery and the narrow passes."""

    def dropped() -> nn.Module:
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.5, batch_first=True)
        return nn.Sequential(nn.TransformerEncoder(layer, 1), nn.Flatten(), nn.Linear(16 * 6, 3))

    _, tracer = train(dropped, lambda m: F.cross_entropy(m(XS), YS), 4, {"every": 1})
    steps, residual = tracer.history.series("0.layers.0.self_attn", "alpha_residual")
    assert steps == [0, 1, 2, 3] and min(residual) > 1e-2


def test_attention_alarms_are_read_under_sdpa_dropout():
    """GPT-2's default attention dropout breaks both residuals of its SDPA sites (the output
    uses the dropped weights), yet the statistics of the scores are those before dropout: the
    record says `dropout`, and the attention rules still read it (the other sites stay gated
    by `exact`)."""
    pytest.importorskip("transformers")
    from implicit_em.trace import CollapseWarning, Thresholds

    model = small_gpt2("sdpa", dropout=0.1)
    ids = torch.randint(0, 40, (2, 12))
    with (
        pytest.warns(CollapseWarning),
        Tracer(model, thresholds=Thresholds(max_logit=0.0)) as tracer,
    ):
        model(input_ids=ids, labels=ids).loss.backward()
        tracer.step()
        model.eval()
        model(input_ids=ids, labels=ids).loss.backward()
        tracer.step()
    attn = [
        r for r in tracer.history if r["site"] == "transformer.h.0.attn" and r["kind"] == "site"
    ]
    assert [(r["dropout"], r["exact"]) for r in attn] == [(pytest.approx(0.1), False), (0.0, True)]
    growth = [
        a["step"]
        for a in tracer.alarms
        if a["alarm"] == "attention_logit_growth" and a["site"] == "transformer.h.0.attn"
    ]
    assert growth == [0, 1]


def test_package_attention_is_an_eager_site():
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3))
    with Tracer() as tracer:
        o, _ = attention(q, k, v, is_causal=True)
        o.pow(2).sum().backward()
        tracer.step()
    r = tracer.history.last("attention")
    assert r["value_residual"] <= 1e-5 and r["routing_norm"] > 0


def _bert(impl: str) -> nn.Module:
    cfg = transformers.BertConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=12,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=3,
    )
    return transformers.BertForSequenceClassification._from_config(cfg, attn_implementation=impl)


IDS = torch.randint(0, 40, (4, 10), generator=torch.Generator().manual_seed(0))
MASK = torch.ones(4, 10, dtype=torch.long)
MASK[1, 7:] = 0
LABELS = torch.tensor([0, 2, 1, 0])


def _gpt2_step(m: nn.Module) -> torch.Tensor:
    return m(input_ids=IDS, labels=IDS).loss


def _bert_step(m: nn.Module) -> torch.Tensor:
    return m(input_ids=IDS, attention_mask=MASK, labels=LABELS).loss


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize(
    ("make", "step", "sites"),
    [
        (small_gpt2, _gpt2_step, ["lm_head.ce", "transformer.h.0.attn", "transformer.h.1.attn"]),
        (
            _bert,
            _bert_step,
            [
                "bert.encoder.layer.0.attention.self",
                "bert.encoder.layer.1.attention.self",
                "classifier.ce",
            ],
        ),
    ],
    ids=["gpt2", "bert"],
)
def test_hugging_face_models(impl, make, step, sites):
    plain, _ = train(lambda: make(impl), step, 3, None)
    traced, tracer = train(lambda: make(impl), step, 3, {"every": 1})
    assert_same_parameters(plain, traced)
    assert tracer.history.sites() == sites
    for r in tracer.history:
        if r["type"] == "attention":
            assert r["value_residual"] <= 1e-5
            assert r["alpha_residual"] is None or r["alpha_residual"] <= 1e-5
            assert r["routing_norm"] > 0 and r["value_norm"] > 0
        else:
            assert r["residual"] <= 1e-5 and r["source"] == "gradient"


def test_eager_and_sdpa_see_the_same_attention():
    entropies = {}
    for impl in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = _bert(impl)
        with Tracer(model) as tracer:
            _bert_step(model).backward()
            tracer.step()
        entropies[impl] = tracer.history.series(
            "bert.encoder.layer.1.attention.self", "head_entropy"
        )[1]
    torch.testing.assert_close(torch.tensor(entropies["eager"]), torch.tensor(entropies["sdpa"]))

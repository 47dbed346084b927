"""R2's measurement: captured heads of a GPT, the explained shares, and the character GPT."""

from __future__ import annotations

import math

import pytest
import torch

from implicit_em.report.experiments import _char_gpt as cg
from implicit_em.report.experiments import _score_gradients as sg
from implicit_em.windtunnel.models import GPT, GPTConfig


def test_explained_share_is_one_for_a_multiple_and_zero_for_an_orthogonal_form() -> None:
    g = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    assert torch.allclose(sg.explained_share(g, -2.5 * g), torch.ones(2, dtype=torch.float64))
    f = torch.zeros_like(g)
    f[..., 0, 0] = 1.0
    g[..., 0, 0] = 0.0
    assert torch.allclose(sg.explained_share(g, f), torch.zeros(2, dtype=torch.float64))
    assert torch.isnan(sg.explained_share(torch.zeros_like(g), f)).all()


@pytest.mark.parametrize("split_qkv", [False, True])
def test_captured_gradient_is_the_loss_gradient_of_the_head_outputs(split_qkv: bool) -> None:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=7, n_classes=7, block_size=6, n_layer=2, n_head=2, n_embd=8)
    model = GPT(GPTConfig(**{**config.__dict__, "split_qkv": split_qkv})).double()
    tokens = torch.randint(0, 7, (3, 7))
    attn = model.blocks[0].attn
    seen = {}
    source = attn.value if split_qkv else attn.qkv
    handle = source.register_forward_pre_hook(lambda m, i: seen.__setitem__("x", i[0]))
    captures = sg.capture_heads(model, lambda: cg.next_char_loss(model, tokens))
    handle.remove()
    assert len(captures) == 2
    c = captures[0]
    parts_v = torch.einsum("hbij,hbie->hbje", _alpha(c), c.grad_output.transpose(0, 1))
    dv = parts_v.transpose(0, 1).transpose(1, 2).reshape(3, 6, 8)  # [B, T, C]
    expected = dv.flatten(0, 1).T @ seen["x"].detach().flatten(0, 1)
    weight = attn.value.weight.grad if split_qkv else attn.qkv.weight.grad[16:]
    torch.testing.assert_close(weight, expected)
    shares = sg.head_shares(c)
    assert shares["advantage"].shape == (2,)
    torch.testing.assert_close(shares["advantage"], torch.ones(2, dtype=torch.float64))
    assert (shares["forward_residual"] < 1e-10).all()
    assert ((shares["minus_r"] >= 0) & (shares["minus_r"] <= 1)).all()


def test_an_lse_loss_over_the_scores_reads_as_the_minus_r_form() -> None:
    torch.manual_seed(1)
    config = GPTConfig(vocab_size=7, n_classes=7, block_size=6, n_layer=1, n_head=2, n_embd=8)
    model = GPT(config).double()
    tokens = torch.randint(0, 7, (4, 7))
    (capture,) = sg.capture_heads(model, lambda: cg.next_char_loss(model, tokens))
    lse = sg.head_shares(capture, "lse")
    # dL/ds = -alpha exactly; row-centred it is the -r form: R² 1, keys pulled in alpha's order.
    torch.testing.assert_close(lse["minus_r"], torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(lse["minus_r_rank"], torch.ones(2, dtype=torch.float64))
    # The model's own loss reaches the scores through the values: the advantage law, not -r.
    downstream = sg.head_shares(capture)
    torch.testing.assert_close(downstream["advantage"], torch.ones(2, dtype=torch.float64))
    assert (downstream["minus_r"] < 0.5).all()
    with pytest.raises(ValueError, match="loss must be one of"):
        sg.head_shares(capture, "hinge")


def _alpha(c: sg.HeadCapture) -> torch.Tensor:
    q, k = c.q.transpose(0, 1), c.k.transpose(0, 1)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    t = s.shape[-1]
    s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, dim=-1)


def test_char_corpus_and_a_short_training_run() -> None:
    corpus = cg.char_corpus()
    assert corpus.vocab_size > 40 and len(corpus.train) > 9 * len(corpus.held_out) - 10
    assert all(c.isascii() for c in corpus.vocabulary)
    generator = torch.Generator().manual_seed(0)
    window = cg.windows(corpus.held_out, 8, 16, generator)
    assert window.shape == (8, 17)
    untrained = cg.train_char_gpt(corpus, 0, 0, block_size=16, n_embd=16, n_head=2, n_layer=1)
    trained = cg.train_char_gpt(corpus, 0, 60, block_size=16, n_embd=16, n_head=2, n_layer=1)
    with torch.no_grad():
        before = float(cg.next_char_loss(untrained, window))
        after = float(cg.next_char_loss(trained, window))
    assert after < before - 0.5
    with pytest.raises(ValueError, match="shorter than one window"):
        cg.windows(corpus.held_out[:5], 1, 16, generator)


def test_windtunnel_shares_read_a_trained_run(tmp_path) -> None:
    from implicit_em.windtunnel.train import preset, run

    config = preset(
        "bijection",
        "reference-cpu",
        task_params={"n_symbols": 4, "n_pairs": 3, "replacement": False},
        n_layer=1,
        n_head=2,
        n_embd=16,
        steps=10,
        warmup=2,
        eval_every=10,
        ckpt_every=10,
        n_test=16,
        batch_size=8,
    )
    run(config, tmp_path, progress=False)
    layers = sg.windtunnel_shares(config, tmp_path)
    assert len(layers) == 1 and len(layers[0]["minus_r"]) == 2
    assert min(layers[0]["advantage"]) > 0.999
    with pytest.raises(FileNotFoundError, match="no wind-tunnel checkpoint"):
        sg.windtunnel_shares(config, tmp_path / "missing")

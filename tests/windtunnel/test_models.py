"""Shapes, causality, eager/SDPA agreement and capacity matching of the wind-tunnel models."""

from __future__ import annotations

import pytest
import torch

from implicit_em.windtunnel.models import (
    GPT,
    GPTConfig,
    PositionMLP,
    PositionMLPConfig,
    PrefixMLP,
    count_parameters,
    matched_mlp,
    matched_position_mlp,
)

CONFIGS = [
    GPTConfig(vocab_size=20, n_classes=10, block_size=20, n_layer=3, n_head=4, n_embd=64),
    GPTConfig(vocab_size=40, n_classes=20, block_size=40, n_layer=6, n_head=6, n_embd=192),
    GPTConfig(vocab_size=16, n_classes=5, block_size=62, n_layer=2, n_head=2, n_embd=32),
    GPTConfig(vocab_size=3, n_classes=2, block_size=8, n_layer=1, n_head=1, n_embd=8),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_mlp_parameter_count_within_ten_percent(config: GPTConfig, depth: int) -> None:
    n_gpt = count_parameters(GPT(config))
    n_mlp = count_parameters(PrefixMLP(matched_mlp(config, depth=depth)))
    assert abs(n_mlp - n_gpt) <= 0.1 * n_gpt


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_position_mlp_parameter_count_within_three_percent(config: GPTConfig, norm: str) -> None:
    config = GPTConfig(**{**config.__dict__, "norm": norm})
    n_gpt = count_parameters(GPT(config))
    n_mlp = count_parameters(PositionMLP(matched_position_mlp(config)))
    assert abs(n_mlp - n_gpt) <= 0.03 * n_gpt


def test_position_mlp_matches_by_depth_at_the_reference_size() -> None:
    config = GPTConfig(40, 20, 38, n_layer=6, n_head=6, n_embd=192, norm="rmsnorm")
    matched = matched_position_mlp(config)
    assert (matched.n_block, matched.hidden, matched.n_embd) == (9, None, 192)


def _models(config: GPTConfig) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    rms = GPTConfig(**{**config.__dict__, "norm": "rmsnorm"})
    return [GPT(config), PrefixMLP(matched_mlp(config)), GPT(rms), PrefixMLP(matched_mlp(rms))]


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_position_mlp_does_not_mix_positions(norm: str) -> None:
    torch.manual_seed(0)
    model = PositionMLP(PositionMLPConfig(20, 10, 20, n_embd=32, n_block=3, norm=norm))
    tokens = torch.randint(0, 20, (4, 20))
    logits = model(tokens)
    assert logits.shape == (4, 20, 10)
    for t in (1, 9, 19):
        # Every token before t (and after it) changes: the output at t does not.
        changed = tokens.clone()
        changed[:, :t] = (changed[:, :t] + 1 + torch.arange(t)) % 20
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 3) % 20
        torch.testing.assert_close(model(changed)[:, t], logits[:, t])
        assert not torch.allclose(model(changed)[:, :t], logits[:, :t])
    # Its own token does matter.
    flipped = tokens.clone()
    flipped[:, 5] = (flipped[:, 5] + 1) % 20
    assert not torch.allclose(model(flipped)[:, 5], logits[:, 5])


def test_split_qkv_computes_the_same_function() -> None:
    torch.manual_seed(2)
    config = CONFIGS[2]
    joint = GPT(config)
    split = GPT(GPTConfig(**{**config.__dict__, "split_qkv": True}))
    state = dict(joint.state_dict())
    for i in range(config.n_layer):
        w = state.pop(f"blocks.{i}.attn.qkv.weight").chunk(3)
        bias = state.pop(f"blocks.{i}.attn.qkv.bias").chunk(3)
        for name, wi, bi in zip(("query", "key", "value"), w, bias, strict=True):
            state[f"blocks.{i}.attn.{name}.weight"], state[f"blocks.{i}.attn.{name}.bias"] = wi, bi
    split.load_state_dict(state)
    tokens = torch.randint(0, config.vocab_size, (3, config.block_size))
    torch.testing.assert_close(split(tokens), joint(tokens))


@pytest.mark.parametrize("model", _models(CONFIGS[0]))
def test_shapes_and_causality(model: torch.nn.Module) -> None:
    tokens = torch.randint(0, 20, (3, 20))
    logits = model(tokens)
    assert logits.shape == (3, 20, 10)
    # Changing token t changes no prediction before t.
    changed = tokens.clone()
    changed[:, 12] = (changed[:, 12] + 1) % 20
    other = model(changed)
    torch.testing.assert_close(other[:, :12], logits[:, :12])
    assert not torch.allclose(other[:, 12:], logits[:, 12:])
    # Shorter inputs are prefixes.
    torch.testing.assert_close(model(tokens[:, :7]), logits[:, :7], atol=1e-5, rtol=1e-5)


def test_eager_attention_matches_sdpa_and_keeps_alpha() -> None:
    config = CONFIGS[2]
    torch.manual_seed(1)
    fast = GPT(config)
    eager = GPT(GPTConfig(**{**config.__dict__, "sdpa": False}))
    eager.load_state_dict(fast.state_dict())
    tokens = torch.randint(0, config.vocab_size, (4, config.block_size))
    torch.testing.assert_close(eager(tokens), fast(tokens), atol=1e-5, rtol=1e-5)
    alpha = eager.blocks[0].attn.last_alpha
    assert alpha is not None and alpha.shape == (
        4,
        config.n_head,
        config.block_size,
        config.block_size,
    )
    torch.testing.assert_close(alpha.sum(-1), torch.ones(alpha.shape[:-1]))
    assert bool((alpha.triu(diagonal=1) == 0).all())


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(vocab_size=4, n_classes=2, block_size=4, n_head=3, n_embd=64)

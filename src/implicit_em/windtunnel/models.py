r"""Wind-tunnel models: a small causal GPT and a capacity-matched MLP over the same embeddings.

Both map ``tokens[B, T]`` to ``logits[B, T, K]``; the prediction at position ``t`` depends only on
``tokens[:, : t + 1]``. The objectives read distances ``d = -logits``.

* :class:`GPT` (after nanoGPT): token + position embeddings, ``n_layer`` pre-norm blocks of causal
  multi-head attention and a GELU MLP, a final LayerNorm and a linear head. Attention runs either
  eagerly through :func:`implicit_em.attention.attention` (the weights :math:`\alpha` are kept on
  the module as ``last_alpha`` for tracing) or through ``scaled_dot_product_attention``.
* :class:`PrefixMLP`: the same embeddings, concatenated over the causal prefix (zeros for the
  future) and fed to an MLP. Its first layer on the concatenation
  :math:`h_t = \sum_{j \le t} U_j e_j + c_t` is computed as a cumulative sum, so all positions
  cost one pass. No token can attend to another: the MLP must learn every slot separately.
  :func:`matched_mlp` picks its width so that its parameter count is within a few percent of a
  given GPT's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from implicit_em.attention import attention

__all__ = ["GPT", "GPTConfig", "MLPConfig", "PrefixMLP", "count_parameters", "matched_mlp"]


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of :class:`GPT`: vocabulary, answers (``n_classes``), context, depth and width."""

    vocab_size: int
    n_classes: int
    block_size: int
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 64
    sdpa: bool = True

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")


class CausalSelfAttention(nn.Module):
    r""":math:`o_i = \sum_{j \le i} \alpha_{ij} v_j`, :math:`\alpha_{ij} = \operatorname{softmax}_{j \le i}(q_i^\top k_j/\sqrt{d_h})` per head."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.sdpa = config.sdpa
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.last_alpha: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y, self.last_alpha = attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Embedding(nn.Module):
    """Token plus learned position embedding, ``[B, T] -> [B, T, C]``."""

    def __init__(self, vocab_size: int, block_size: int, n_embd: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)


class GPT(nn.Module):
    """A small causal transformer: ``tokens[B, T] -> logits[B, T, n_classes]``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = Embedding(config.vocab_size, config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.n_classes)
        self.apply(_init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layer))

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


@dataclass(frozen=True)
class MLPConfig:
    """Sizes of :class:`PrefixMLP`: embeddings as in :class:`GPTConfig`, ``depth`` hidden layers of ``width``."""

    vocab_size: int
    n_classes: int
    block_size: int
    n_embd: int = 64
    width: int = 256
    depth: int = 2


class PrefixMLP(nn.Module):
    r"""An MLP over the concatenated prefix embeddings, ``tokens[B, T] -> logits[B, T, K]``.

    Position :math:`t` sees :math:`[e_1; \dots; e_t; 0; \dots; 0] \in \mathbb R^{T C}`; the first
    layer :math:`h_t = \sum_{j \le t} U_j e_j + c_t` (weights :math:`U_j \in \mathbb R^{W \times C}`
    per slot, a bias :math:`c_t` per query position) is followed by ``depth - 1`` layers
    ``Linear(W, W)`` and GELUs, a LayerNorm and a linear head.
    """

    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        if config.depth < 1:
            raise ValueError(f"depth must be >= 1, got {config.depth}")
        self.config = config
        self.embed = Embedding(config.vocab_size, config.block_size, config.n_embd)
        self.slot_weight = nn.Parameter(
            torch.randn(config.block_size, config.width, config.n_embd)
            / math.sqrt(config.block_size * config.n_embd)
        )
        self.query_bias = nn.Parameter(torch.zeros(config.block_size, config.width))
        layers: list[nn.Module] = [nn.GELU()]
        for _ in range(config.depth - 1):
            layers += [nn.Linear(config.width, config.width), nn.GELU()]
        layers += [nn.LayerNorm(config.width), nn.Linear(config.width, config.n_classes)]
        self.mlp = nn.Sequential(*layers)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.shape[1]
        e = self.embed(tokens)
        per_slot = torch.einsum("btc,twc->btw", e, self.slot_weight[:t])
        h = per_slot.cumsum(dim=1) + self.query_bias[:t]
        return self.mlp(h)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _mlp_parameters(config: MLPConfig) -> int:
    c, w, k, t = config.n_embd, config.width, config.n_classes, config.block_size
    embed = (config.vocab_size + t) * c
    first = t * w * c + t * w
    hidden = (config.depth - 1) * (w * w + w)
    return embed + first + hidden + 2 * w + w * k + k


def matched_mlp(config: GPTConfig, depth: int = 2) -> MLPConfig:
    """The :class:`MLPConfig` with ``depth`` hidden layers whose parameter count is closest to
    that of ``GPT(config)`` (same vocabulary, embeddings and context)."""
    target = count_parameters(GPT(config))
    base = dict(
        vocab_size=config.vocab_size,
        n_classes=config.n_classes,
        block_size=config.block_size,
        n_embd=config.n_embd,
        depth=depth,
    )
    size = lambda w: _mlp_parameters(MLPConfig(**base, width=w))  # noqa: E731
    lo, hi = 1, 2
    while size(hi) < target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # size is increasing in the width: bisect to size(lo) < target <= size(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if size(mid) < target else (lo, mid)
    best = min((lo, hi), key=lambda w: abs(size(w) - target))
    return MLPConfig(**base, width=best)

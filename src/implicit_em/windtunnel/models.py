r"""Wind-tunnel models: a small causal GPT and two capacity-matched MLP controls.

All map `tokens[B, T]` to `logits[B, T, K]`; the prediction at position `t` depends only on
`tokens[:, : t + 1]`. The objectives read distances `d = -logits`.

* `GPT` (after nanoGPT): token + position embeddings, `n_layer` pre-norm blocks of causal
  multi-head attention and a GELU MLP, a final LayerNorm and a linear head. Attention runs either
  eagerly through `implicit_em.attention.attention` (the weights $\alpha$ are kept on
  the module as `last_alpha` for tracing) or through `scaled_dot_product_attention`.
* `PrefixMLP`: the same embeddings, concatenated over the causal prefix (zeros for the
  future) and fed to an MLP. Its first layer on the concatenation
  $h_t = \sum_{j \le t} U_j e_j + c_t$ is computed as a cumulative sum, so all positions
  cost one pass. No token can attend to another: the MLP must learn every slot separately.
  `matched_mlp` picks its width so that its parameter count is within a few percent of a
  given GPT's.
* `PositionMLP`: the same embeddings, then residual MLP blocks applied at each position
  alone: no mixing across positions, so the prediction at `t` reads only `tokens[:, t]` and
  `t`. It cannot use the context; its error is the task's context-free floor.
  `matched_position_mlp` picks its number of blocks (width as the GPT's) to match the
  GPT's parameter count.

Normalization layers are LayerNorm or RMSNorm (`norm="layernorm" | "rmsnorm"`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from implicit_em.attention import attention

__all__ = [
    "GPT",
    "NORMS",
    "GPTConfig",
    "MLPConfig",
    "PositionMLP",
    "PositionMLPConfig",
    "PrefixMLP",
    "count_parameters",
    "make_norm",
    "matched_mlp",
    "matched_position_mlp",
]

NORMS = ("layernorm", "rmsnorm")


def make_norm(kind: str, width: int) -> nn.Module:
    r"""LayerNorm ($\gamma \odot (x-\mu)/\sigma + \beta$) or RMSNorm
    ($\gamma \odot x / \sqrt{\overline{x^2}+\epsilon}$) over the last axis."""
    if kind == "layernorm":
        return nn.LayerNorm(width)
    if kind == "rmsnorm":
        return nn.RMSNorm(width, eps=1e-5)
    raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of `GPT`: vocabulary, answers (`n_classes`), context, depth and width.

    `norm` picks LayerNorm or RMSNorm; `split_qkv` holds the query, key and value projections
    as three parameters (`query`, `key`, `value`) instead of one `qkv`, so that an
    optimizer can give the values their own learning rate. The function computed is the same.
    """

    vocab_size: int
    n_classes: int
    block_size: int
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 64
    sdpa: bool = True
    norm: str = "layernorm"
    split_qkv: bool = False

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")


class CausalSelfAttention(nn.Module):
    r"""$o_i = \sum_{j \le i} \alpha_{ij} v_j$, $\alpha_{ij} = \operatorname{softmax}_{j \le i}(q_i^\top k_j/\sqrt{d_h})$ per head."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.sdpa = config.sdpa
        c = config.n_embd
        if config.split_qkv:
            self.query, self.key, self.value = (nn.Linear(c, c) for _ in range(3))
        else:
            self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.last_alpha: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        if hasattr(self, "qkv"):
            q, k, v = self.qkv(x).split(c, dim=2)
        else:
            q, k, v = self.query(x), self.key(x), self.value(x)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y, self.last_alpha = attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm transformer block: `x + attn(ln(x))` then `x + mlp(ln(x))`."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = make_norm(config.norm, config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = make_norm(config.norm, config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Embedding(nn.Module):
    """Token plus learned position embedding, `[B, T] -> [B, T, C]`."""

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
    """A small causal transformer: `tokens[B, T] -> logits[B, T, n_classes]`."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = Embedding(config.vocab_size, config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = make_norm(config.norm, config.n_embd)
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
    """Sizes of `PrefixMLP`: embeddings as in `GPTConfig`, `depth` hidden layers of `width`."""

    vocab_size: int
    n_classes: int
    block_size: int
    n_embd: int = 64
    width: int = 256
    depth: int = 2
    norm: str = "layernorm"


class PrefixMLP(nn.Module):
    r"""An MLP over the concatenated prefix embeddings, `tokens[B, T] -> logits[B, T, K]`.

    Position $t$ sees $[e_1; \dots; e_t; 0; \dots; 0] \in \mathbb R^{T C}$; the first
    layer $h_t = \sum_{j \le t} U_j e_j + c_t$ (weights $U_j \in \mathbb R^{W \times C}$
    per slot, a bias $c_t$ per query position) is followed by `depth - 1` layers
    `Linear(W, W)` and GELUs, a LayerNorm and a linear head.
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
        layers += [make_norm(config.norm, config.width), nn.Linear(config.width, config.n_classes)]
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
    norm = 2 * w if config.norm == "layernorm" else w
    return embed + first + hidden + norm + w * k + k


def matched_mlp(config: GPTConfig, depth: int = 2) -> MLPConfig:
    """The `MLPConfig` with `depth` hidden layers whose parameter count is closest to
    that of `GPT(config)` (same vocabulary, embeddings and context)."""
    target = count_parameters(GPT(config))
    base = dict(
        vocab_size=config.vocab_size,
        n_classes=config.n_classes,
        block_size=config.block_size,
        n_embd=config.n_embd,
        depth=depth,
        norm=config.norm,
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


@dataclass(frozen=True)
class PositionMLPConfig:
    """Sizes of `PositionMLP`: embeddings as in `GPTConfig`, `n_block` residual
    blocks of hidden width `hidden` (`4 * n_embd` when not given)."""

    vocab_size: int
    n_classes: int
    block_size: int
    n_embd: int = 64
    n_block: int = 3
    norm: str = "layernorm"
    hidden: int | None = None

    def __post_init__(self) -> None:
        if self.n_block < 1:
            raise ValueError(f"n_block must be >= 1, got {self.n_block}")
        if self.hidden is not None and self.hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {self.hidden}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")


class PositionMLP(nn.Module):
    r"""Residual MLP blocks applied at every position separately, `tokens[B, T] -> logits[B, T, K]`.

    $x_t = e(\text{token}_t) + p_t$, then `n_block` times
    $x_t \leftarrow x_t + W_2\,\operatorname{gelu}(W_1 \operatorname{norm}(x_t))$, a final norm
    and a linear head. Nothing mixes positions: the output at `t` is a function of
    `tokens[:, t]` and `t` alone (the reference protocol's MLP control).
    """

    def __init__(self, config: PositionMLPConfig) -> None:
        super().__init__()
        self.config = config
        c = config.n_embd
        h = 4 * c if config.hidden is None else config.hidden
        self.embed = Embedding(config.vocab_size, config.block_size, c)
        self.blocks = nn.ModuleList(
            nn.Sequential(make_norm(config.norm, c), nn.Linear(c, h), nn.GELU(), nn.Linear(h, c))
            for _ in range(config.n_block)
        )
        self.ln_f = make_norm(config.norm, c)
        self.head = nn.Linear(c, config.n_classes)
        self.apply(_init_weights)
        for block in self.blocks:
            nn.init.normal_(block[3].weight, std=0.02 / math.sqrt(2 * config.n_block))

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.ln_f(x))


def matched_position_mlp(config: GPTConfig) -> PositionMLPConfig:
    """The `PositionMLPConfig` of the GPT's width and norm matched to `GPT(config)`'s
    parameter count.

    The number of blocks (hidden width `4 C`) is the one whose count is closest: about 1.5
    blocks per layer, since a block has `8 C^2` weights and a transformer layer `12 C^2`
    (9 blocks for 6 layers). When that count is still more than 3% off (an odd number of layers),
    the hidden width is then set to the one whose count is closest.
    """
    target = count_parameters(GPT(config))
    base = dict(
        vocab_size=config.vocab_size,
        n_classes=config.n_classes,
        block_size=config.block_size,
        n_embd=config.n_embd,
        norm=config.norm,
    )

    def size(n: int) -> int:
        return count_parameters(PositionMLP(PositionMLPConfig(**base, n_block=n)))

    per_block = size(2) - size(1)
    guess = max(1, round((target - size(1)) / per_block) + 1)
    best = min(range(max(1, guess - 1), guess + 2), key=lambda n: abs(size(n) - target))
    if abs(size(best) - target) <= 0.03 * target:
        return PositionMLPConfig(**base, n_block=best)

    def sized(h: int) -> int:
        return count_parameters(PositionMLP(PositionMLPConfig(**base, n_block=best, hidden=h)))

    per_unit = sized(2) - sized(1)
    hidden = max(1, 1 + round((target - sized(1)) / per_unit))
    return PositionMLPConfig(**base, n_block=best, hidden=hidden)

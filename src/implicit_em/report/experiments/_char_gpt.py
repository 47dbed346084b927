"""A small character-level GPT on text that ships with scikit-learn (no download).

The corpus is the concatenation, in file-name order, of the data-set descriptions bundled in
`sklearn.datasets.descr` (about 43,000 characters in scikit-learn 1.9), every non-ASCII
character replaced by `?`. The model is the wind tunnel's [GPT][implicit_em.windtunnel.models.GPT]
with the vocabulary as its classes, trained by next-character cross-entropy with Adam on random
windows of the first 90% of the text; the last 10% is held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import torch
from torch import Tensor

from implicit_em.windtunnel.models import GPT, GPTConfig

__all__ = ["CharCorpus", "char_corpus", "next_char_loss", "train_char_gpt", "windows"]


@dataclass(frozen=True)
class CharCorpus:
    """Token ids of the training and held-out text, and the vocabulary (sorted characters)."""

    train: Tensor
    held_out: Tensor
    vocabulary: str

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)


def char_corpus() -> CharCorpus:
    """scikit-learn's bundled data-set descriptions as character ids, split 90/10 in order."""
    files = sorted(
        (p for p in resources.files("sklearn.datasets.descr").iterdir() if p.name.endswith(".rst")),
        key=lambda p: p.name,
    )
    text = "".join(p.read_text(encoding="utf-8") for p in files)
    text = "".join(c if c.isascii() else "?" for c in text)
    vocabulary = "".join(sorted(set(text)))
    index = {c: i for i, c in enumerate(vocabulary)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    cut = int(0.9 * len(ids))
    return CharCorpus(ids[:cut], ids[cut:], vocabulary)


def windows(ids: Tensor, batch: int, length: int, generator: torch.Generator) -> Tensor:
    """`batch` random windows of `length + 1` consecutive ids: `[batch, length + 1]`."""
    if len(ids) <= length + 1:
        raise ValueError(f"the text ({len(ids)} ids) is shorter than one window ({length + 1})")
    start = torch.randint(0, len(ids) - length - 1, (batch,), generator=generator)
    return ids[start[:, None] + torch.arange(length + 1)]


def next_char_loss(model: GPT, window: Tensor) -> Tensor:
    """Mean next-character cross-entropy (nats) of `model` on `window[B, T + 1]`."""
    logits = model(window[:, :-1])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())


def train_char_gpt(
    corpus: CharCorpus,
    seed: int,
    steps: int,
    *,
    n_layer: int = 2,
    n_head: int = 4,
    n_embd: int = 64,
    block_size: int = 64,
    batch: int = 32,
    lr: float = 3e-3,
) -> GPT:
    """A GPT trained `steps` Adam steps on random windows of `corpus.train` (seed `seed`)."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    config = GPTConfig(
        vocab_size=corpus.vocab_size,
        n_classes=corpus.vocab_size,
        block_size=block_size,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
    )
    model = GPT(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = next_char_loss(model, windows(corpus.train, batch, block_size, generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model

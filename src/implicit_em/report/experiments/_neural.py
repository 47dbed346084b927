r"""Shared parts of the neural experiments E6-E9: images on a device, minibatches, summaries.

Everything here works on whole batches as tensors; the only Python loops are over training
steps, seeds and configurations.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from implicit_em.data import load_dataset

__all__ = [
    "Images",
    "MLPEncoder",
    "device_of",
    "entropy",
    "expected_calibration_error",
    "images_of",
    "linear_probe_accuracy",
    "load_images",
    "mean_std",
    "minibatches",
    "plus_minus",
    "quiet_alarms",
    "spearman_rows",
]


@dataclass(frozen=True)
class Images:
    """A train/test split as float32 tensors on one device; pixels centred by the training mean.

    Attributes
    ----------
    name : str
        The data set (`"digits"`, `"fashion-mnist"`).
    x_train, x_test : Tensor
        `[N, D]` float32 images of the training and the test split.
    y_train, y_test : Tensor
        `[N]` int64 class indices of the training and the test split.
    classes : tuple of str
        The class names.
    source : str
        Where the images were read from.
    mean : Tensor
        `[1, D]`: the training mean subtracted from both splits (to centre other images alike).
    """

    name: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    classes: tuple[str, ...]
    source: str
    mean: Tensor

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])


def device_of(config: Mapping[str, Any]) -> torch.device:
    """The device named by `config["device"]` (`"cpu"` when absent)."""
    return torch.device(config.get("device", "cpu"))


def load_images(config: Mapping[str, Any]) -> Images:
    """The data set `config["data"]` on `config["device"]`, centred by the training mean.

    `config["n_train"]` and `config["n_test"]` (optional) keep a random subset of that many
    training and test images, drawn once with a fixed seed, so every seed and configuration sees
    the same data. A missing data set raises `DataNotFoundError` with instructions.
    """
    data = load_dataset(config["data"])
    x_train, y_train = _subset(data.x_train, data.y_train, config.get("n_train"))
    x_test, y_test = _subset(data.x_test, data.y_test, config.get("n_test"))
    device = device_of(config)
    mean = x_train.mean(axis=0, keepdims=True)
    return Images(
        name=data.name,
        x_train=torch.from_numpy(x_train - mean).to(device),
        y_train=torch.from_numpy(y_train).to(device),
        x_test=torch.from_numpy(x_test - mean).to(device),
        y_test=torch.from_numpy(y_test).to(device),
        classes=data.classes,
        source=data.source,
        mean=torch.from_numpy(mean).to(device),
    )


def images_of(config: Mapping[str, Any]) -> Images:
    """`load_images(config)`, loaded once per process for the same data keys (a unit reads its
    data by its configuration, so the units of one process share one copy)."""
    keys = {k: config.get(k) for k in ("data", "n_train", "n_test", "device")}
    return _images(json.dumps(keys, sort_keys=True))


@lru_cache(maxsize=2)
def _images(keys: str) -> Images:
    return load_images(json.loads(keys))


def _subset(x: np.ndarray, y: np.ndarray, n: int | None) -> tuple[np.ndarray, np.ndarray]:
    """`n` rows drawn once with a fixed seed (in their original order), or all of them."""
    if n is None or n >= len(y):
        return x, y
    keep = np.sort(np.random.default_rng(0).permutation(len(y))[:n])
    return x[keep], y[keep]


def minibatches(
    n: int, batch_size: int, steps: int, generator: torch.Generator
) -> Iterator[Tensor]:
    """`steps` index tensors of `batch_size` rows of `range(n)`: shuffled epochs, each
    permutation drawn with `generator` (on the CPU) and cut into batches; a short last batch
    of an epoch is dropped."""
    if batch_size > n:
        raise ValueError(f"batch_size {batch_size} exceeds the {n} training samples")
    per_epoch = n // batch_size
    done = 0
    while done < steps:
        order = torch.randperm(n, generator=generator)
        for b in range(min(per_epoch, steps - done)):
            yield order[b * batch_size : (b + 1) * batch_size]
        done += min(per_epoch, steps - done)


class MLPEncoder(nn.Module):
    """`x -> ReLU(W_1 x + b_1) -> W_2 h + b_2`: a one-hidden-layer feature map `[..., D] -> [..., F]`."""

    def __init__(self, in_features: int, hidden: int, features: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(in_features, hidden)
        self.out = nn.Linear(hidden, features)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(torch.relu(self.hidden(x)))


def entropy(p: Tensor, dim: int = -1) -> Tensor:
    r"""$H(p) = -\sum_j p_j\log p_j$ in nats along `dim`, with $0\log 0 = 0$."""
    return -torch.special.xlogy(p, p).sum(dim=dim)


def spearman_rows(a: Tensor, b: Tensor) -> Tensor:
    r"""Spearman's rank correlation of each row of `a[R, K]` with the same row of `b[R, K]`.

    Ranks are positions in a stable sort (ties are broken by order, not averaged); a row in which
    either side is constant gets NaN. Returns `[R]`.
    """
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(
            f"a and b must be equal [R, K] tensors, got {tuple(a.shape)}, {tuple(b.shape)}"
        )

    def ranks(x: Tensor) -> Tensor:
        order = torch.argsort(x, dim=-1, stable=True)
        return torch.argsort(order, dim=-1).to(torch.float64)

    ra, rb = ranks(a), ranks(b)
    ra = ra - ra.mean(-1, keepdim=True)
    rb = rb - rb.mean(-1, keepdim=True)
    constant = (a == a[:, :1]).all(-1) | (b == b[:, :1]).all(-1)
    rho = (ra * rb).sum(-1) / torch.sqrt((ra * ra).sum(-1) * (rb * rb).sum(-1))
    return torch.where(constant, torch.full_like(rho, float("nan")), rho)


def expected_calibration_error(confidence: Tensor, correct: Tensor, bins: int = 15) -> float:
    r"""Expected calibration error over `bins` equal-width confidence bins on $(0, 1]$:
    $\sum_b \tfrac{n_b}{N}\,\lvert \mathrm{acc}_b - \mathrm{conf}_b\rvert$."""
    if confidence.shape != correct.shape or confidence.dim() != 1:
        raise ValueError("confidence and correct must be equal 1-D tensors")
    conf = confidence.double().cpu()
    hit = correct.double().cpu()
    index = torch.clamp(torch.ceil(conf * bins).long() - 1, 0, bins - 1)
    conf_sum = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, conf)
    hit_sum = torch.zeros(bins, dtype=torch.float64).index_add_(0, index, hit)
    return float((conf_sum - hit_sum).abs().sum() / max(len(conf), 1))


def linear_probe_accuracy(
    f_train: Tensor, y_train: Tensor, f_test: Tensor, y_test: Tensor, max_iter: int = 300
) -> float:
    """Test accuracy of scikit-learn's `LogisticRegression` (standardized features, L2, C=1)
    fitted on `f_train`: how much class information a linear read-out finds in the features."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        probe.fit(f_train.detach().cpu().double().numpy(), y_train.cpu().numpy())
    return float(probe.score(f_test.detach().cpu().double().numpy(), y_test.cpu().numpy()))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value) of `values`."""
    x = np.asarray(values, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else 0.0


def plus_minus(values: Sequence[float], digits: int = 3) -> str:
    """`"mean ± std"` of `values` with `digits` decimals (`"mean"` for one value)."""
    mean, std = mean_std(values)
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f}" if len(values) == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


@contextmanager
def quiet_alarms() -> Iterator[None]:
    """Silence the tracer's `CollapseWarning` and alarm log lines (its alarms are read from its
    records)."""
    from implicit_em.trace import CollapseWarning

    logger = logging.getLogger("implicit_em.trace")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CollapseWarning)
            yield
    finally:
        logger.setLevel(level)

r"""E9's task and model: piecewise-linear data, linear experts with a softmax gate, and the
measures of routing (see `e9_moe_gates`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "MixtureOfExperts",
    "SegmentGate",
    "expert_distances",
    "gate_kl",
    "kmeans_lines",
    "matched_purity",
    "one_thread",
    "piecewise_task",
    "segment_of",
    "start_model",
]


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one CPU thread inside the block (restored after): E9's models are so small
    that more threads only add synchronization, and on a busy machine they oversubscribe it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def segment_of(x: Tensor, segments: int) -> Tensor:
    """The segment of each `x` in [-1, 1] cut into `segments` equal widths, `[N]` (long)."""
    return torch.clamp(((x + 1.0) / 2.0 * segments).long(), 0, segments - 1)


def piecewise_task(
    n: int, config: dict[str, Any], generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """`n` points of the task: `x` uniform on [-1, 1], its segment (equal widths) and
    `y = slope[s] x + intercept[s] + noise * N(0, 1)`. Returns `x[n, 1]`, `y[n, 1]`, `segment[n]`."""
    slopes = torch.tensor(config["slopes"], dtype=torch.float32)
    intercepts = torch.tensor(config["intercepts"], dtype=torch.float32)
    segments = len(slopes)
    x = torch.rand(n, generator=generator) * 2.0 - 1.0
    segment = segment_of(x, segments)
    y = (
        slopes[segment] * x
        + intercepts[segment]
        + config["noise"] * torch.randn(n, generator=generator)
    )
    return x[:, None], y[:, None], segment


class MixtureOfExperts(nn.Module):
    """K linear experts on a scalar input and a softmax gate: one hidden tanh layer, or the
    module `gate` mapping `x[N, 1]` to logits `[N, K]`."""

    def __init__(self, experts: int, gate_hidden: int, gate: nn.Module | None = None) -> None:
        super().__init__()
        self.experts = nn.Linear(1, experts)
        self.gate = gate or nn.Sequential(
            nn.Linear(1, gate_hidden), nn.Tanh(), nn.Linear(gate_hidden, experts)
        )

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The experts' outputs `o[N, K]` and the gate's log-probabilities `log g[N, K]`."""
        return self.experts(x), torch.log_softmax(self.gate(x), dim=-1)


class SegmentGate(nn.Module):
    """A planted gate with no parameters: logit `scale` for the expert whose index is the
    segment of `x`, 0 for the others (known-answer controls)."""

    def __init__(self, experts: int, scale: float = 10.0) -> None:
        super().__init__()
        self.experts, self.scale = experts, scale

    def forward(self, x: Tensor) -> Tensor:
        segment = segment_of(x[:, 0], self.experts)
        return self.scale * nn.functional.one_hot(segment, self.experts).to(x.dtype)


def kmeans_lines(x: Tensor, y: Tensor, k: int, iterations: int = 25) -> tuple[Tensor, Tensor]:
    r"""The k-means start shared by every E9 fit (call after seeding torch): Lloyd's k-means on
    the standardized points $(x, y)$ from a k-means++ seeding, then one least-squares line per
    cluster, $\min_{w,c}\sum_{t \in C_i}(y_t - w x_t - c)^2$.

    `x[N, 1]`, `y[N, 1]`; returns slopes and intercepts `[k]`. A cluster with fewer than two
    points keeps a flat line at the mean of `y`.
    """
    z = torch.cat([x, y], dim=1)
    z = (z - z.mean(0)) / z.std(0)
    centres = z[torch.randint(len(z), (1,))]
    for _ in range(k - 1):
        weight = torch.cdist(z, centres).min(1).values ** 2
        centres = torch.cat([centres, z[torch.multinomial(weight, 1)]])
    for _ in range(iterations):
        label = torch.cdist(z, centres).argmin(1)
        one_hot = nn.functional.one_hot(label, k).to(z.dtype)
        count = one_hot.sum(0)
        centres = torch.where(
            count[:, None] > 0, one_hot.T @ z / count.clamp_min(1)[:, None], centres
        )
    slopes, intercepts = torch.zeros(k), torch.full((k,), float(y.mean()))
    for i in range(k):
        inside = label == i
        if int(inside.sum()) >= 2:
            design = torch.cat([x[inside], torch.ones_like(x[inside])], dim=1)
            slopes[i], intercepts[i] = torch.linalg.lstsq(design, y[inside]).solution[:, 0]
    return slopes, intercepts


def start_model(
    config: dict[str, Any],
    gate: nn.Module | None = None,
    data: tuple[Tensor, Tensor] | None = None,
) -> MixtureOfExperts:
    """The model every E9 fit starts from (call after seeding torch).

    With `config["start"] == "kmeans"` the experts start on the [kmeans_lines][] of the
    training points `data = (x, y)` (the same start for gradient descent, EM and the rivals);
    otherwise at PyTorch's random initialization. With `config["planted_experts"]` the experts
    start on the task's lines (expert i on segment i); with `config["planted_gate"]` a learned
    gate is replaced by [SegmentGate][]. Both plant a known answer for the known-answer controls.

    Raises
    ------
    ValueError
        If experts are planted and their number differs from the number of segments, or a
        k-means start has no `data`.
    """
    experts = config["experts"]
    planted = [k for k in ("planted_experts", "planted_gate") if config.get(k)]
    if planted and len(config["slopes"]) != experts:
        raise ValueError(
            f"{planted[0]} needs one expert per segment, got {experts} experts and "
            f"{len(config['slopes'])} segments"
        )
    if config.get("planted_gate") and gate is None:
        gate = SegmentGate(experts)
    model = MixtureOfExperts(experts, config["gate_hidden"], gate)
    lines = None
    if config.get("planted_experts"):
        lines = torch.tensor(config["slopes"]), torch.tensor(config["intercepts"])
    elif config.get("start") == "kmeans":
        if data is None:
            raise ValueError("data: a k-means start needs the training points (x, y)")
        lines = kmeans_lines(*data, experts)
    if lines is not None:
        with torch.no_grad():
            model.experts.weight[:, 0] = lines[0]
            model.experts.bias.copy_(lines[1])
    return model


def expert_distances(y: Tensor, o: Tensor, sigma: float = 1.0) -> Tensor:
    r"""$d_i = \tfrac12 (y - o_i)^2/\sigma^2$ for targets `y[N, 1]` and outputs `o[N, K]`."""
    return 0.5 * ((y - o) / sigma) ** 2


def gate_kl(h: Tensor, log_g: Tensor) -> Tensor:
    r"""$\mathrm{KL}(h\,\Vert\,g) = \sum_i h_i(\log h_i - \log g_i)$ per row (nats)."""
    return (torch.special.xlogy(h, h) - h * log_g).sum(-1)


def matched_purity(route: Tensor, segment: Tensor, experts: int, segments: int) -> float:
    """Share of points routed to the expert matched to their segment, under the one-to-one
    matching of segments to experts that maximizes it (`scipy.optimize.linear_sum_assignment`)."""
    from scipy.optimize import linear_sum_assignment

    counts = torch.zeros(segments, experts, dtype=torch.float64)
    counts.index_put_(
        (segment.cpu(), route.cpu()), torch.ones(len(route), dtype=torch.float64), accumulate=True
    )
    rows, cols = linear_sum_assignment(counts.numpy(), maximize=True)
    return float(counts.numpy()[rows, cols].sum() / len(route))

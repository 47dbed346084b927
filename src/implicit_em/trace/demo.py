"""`implicit-em trace-demo`: a distance-head classifier on digits, traced end to end."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
import typer
from sklearn.datasets import load_digits
from torch import Tensor, nn

from implicit_em.arguments import check_writable_folder
from implicit_em.distances import SquaredEuclidean
from implicit_em.trace.sinks import History
from implicit_em.trace.tracer import Tracer

__all__ = [
    "accuracy",
    "class_means",
    "full_batches",
    "make_model",
    "run_demo",
    "summary_table",
    "trace_demo",
]


def class_means(features: Tensor, y: Tensor, n_classes: int) -> Tensor:
    r"""The mean feature of each class, $\mu_k = \frac{1}{|C_k|}\sum_{i \in C_k} h_i$,
    `[K, D]`."""
    onehot = F.one_hot(y, n_classes).to(features.dtype)
    return (onehot.T @ features) / onehot.sum(0).clamp_min(1).unsqueeze(-1)


def make_model(x: Tensor, y: Tensor, n_classes: int = 10, width: int = 32) -> nn.Sequential:
    r"""An MLP feature map $h = \tanh(Wx + b)$ and a squared-Euclidean distance head
    $d_k = \lVert h - \mu_k\rVert^2$ (logits $z = -d$) whose prototypes start at the
    class means of the initial features: every component starts responsible for its class, as
    in a k-means initialization, instead of far from all the data (where one prototype wins
    every row and the others die)."""
    features = nn.Sequential(nn.Linear(x.shape[-1], width), nn.Tanh())
    head = SquaredEuclidean(width, n_classes)
    with torch.no_grad():
        head.prototypes.copy_(class_means(features(x), y, n_classes))
    return nn.Sequential(*features, head)


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Share of rows whose nearest prototype is their class."""
    with torch.no_grad():
        return (model(x).argmin(-1) == y).float().mean().item()


def full_batches(n: int, batch_size: int) -> list[Tensor]:
    """A shuffled epoch of row indices in batches of exactly `batch_size` (the remainder is
    dropped: a batch of a few rows would show a handful of live components, not collapse)."""
    return list(torch.randperm(n)[: n - n % batch_size].split(batch_size))


def run_demo(
    out: Path, epochs: int = 3, batch_size: int = 64, seed: int = 0, every: int = 1
) -> tuple[History, float]:
    """Train an MLP with a squared-Euclidean distance head ($z = -d$) on digits with the
    tracer on; writes `trace.jsonl`, TensorBoard events under `tb/` and PNG figures.
    Returns the history and the accuracy on the held-out last 128 digits (also the probe)."""
    torch.manual_seed(seed)
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target)
    probe_x, probe_y = x[-128:], y[-128:]
    train_x, train_y = x[:-128], y[:-128]
    model = make_model(train_x, train_y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace.jsonl").unlink(missing_ok=True)
    sinks = ["memory", f"jsonl:{out / 'trace.jsonl'}", f"tensorboard:{out / 'tb'}"]
    with Tracer(
        model, every=every, sinks=sinks, probe=lambda: F.cross_entropy(-model(probe_x), probe_y)
    ) as tracer:
        for _ in range(epochs):
            for idx in full_batches(len(train_x), batch_size):
                loss = F.cross_entropy(-model(train_x[idx]), train_y[idx])
                loss.backward()
                opt.step()
                opt.zero_grad()
                tracer.step()
    from implicit_em.trace.figures import standard_figures

    standard_figures(tracer.history, out / "figures")
    return tracer.history, accuracy(model, probe_x, probe_y)


def summary_table(history: History) -> str:
    """One line per site: its latest metrics and how many alarms it raised."""
    header = f"{'site':<28} {'type':<14} {'step':>5} {'eff K':>7} {'entropy':>8} {'dominance':>9} {'churn':>7} {'residual':>10} {'alarms':>6}"
    lines = [header, "-" * len(header)]
    alarms = history.alarms()

    def fmt(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    for site in history.sites():
        r = history.last(site)
        n_alarms = sum(a["site"] == site for a in alarms)
        residual = r.get("residual", r.get("value_residual"))
        lines.append(
            f"{site:<28} {r['type']:<14} {r['step']:>5} {fmt(r.get('effective_k'), '7.3f'):>7} "
            f"{fmt(r.get('entropy'), '8.4f'):>8} {fmt(r.get('dominance'), '9.3f'):>9} "
            f"{fmt(r.get('churn'), '7.3f'):>7} {fmt(residual, '10.2e'):>10} {n_alarms:>6}"
        )
    return "\n".join(lines)


def trace_demo(
    out: Path = typer.Option(Path("trace-demo"), help="Output folder (JSONL, TensorBoard, PNG)."),
    epochs: int = typer.Option(3, min=1, help="Training epochs over digits."),
    every: int = typer.Option(1, min=1, help="Measure every N-th step."),
    seed: int = typer.Option(0, help="Random seed."),
) -> None:
    """Train a small distance-head classifier on digits with the tracer on and summarize it."""
    check_writable_folder(out, "--out")
    history, acc = run_demo(out, epochs=epochs, seed=seed, every=every)
    typer.echo(summary_table(history))
    typer.echo(f"\nheld-out accuracy (last 128 digits): {acc:.3f}")
    typer.echo(
        f"\n{len(history)} records; wrote {out / 'trace.jsonl'}, {out / 'tb'} and {out / 'figures'}"
    )
    typer.echo(
        f"its health page: implicit-em trace report {out / 'trace.jsonl'} --out {out / 'page'}"
    )

"""``implicit-em trace-demo``: a distance-head classifier on digits, traced end to end."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
import typer
from sklearn.datasets import load_digits
from torch import nn

from implicit_em.distances import SquaredEuclidean
from implicit_em.trace.sinks import History
from implicit_em.trace.tracer import Tracer

__all__ = ["run_demo", "summary_table", "trace_demo"]


def run_demo(
    out: Path, epochs: int = 3, batch_size: int = 64, seed: int = 0, every: int = 1
) -> History:
    """Train an MLP with a squared-Euclidean distance head (:math:`z = -d`) on digits with the
    tracer on; writes ``trace.jsonl``, TensorBoard events under ``tb/`` and PNG figures."""
    torch.manual_seed(seed)
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target)
    model = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), SquaredEuclidean(32, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    probe_x, probe_y = x[-128:], y[-128:]
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace.jsonl").unlink(missing_ok=True)
    sinks = ["memory", f"jsonl:{out / 'trace.jsonl'}", f"tensorboard:{out / 'tb'}"]
    with Tracer(
        model, every=every, sinks=sinks, probe=lambda: F.cross_entropy(-model(probe_x), probe_y)
    ) as tracer:
        for _ in range(epochs):
            for idx in torch.randperm(len(x) - 128).split(batch_size):
                loss = F.cross_entropy(-model(x[idx]), y[idx])
                loss.backward()
                opt.step()
                opt.zero_grad()
                tracer.step()
    from implicit_em.plot import standard_figures

    standard_figures(tracer.history, out / "figures")
    return tracer.history


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
    history = run_demo(out, epochs=epochs, seed=seed, every=every)
    typer.echo(summary_table(history))
    typer.echo(
        f"\n{len(history)} records; wrote {out / 'trace.jsonl'}, {out / 'tb'} and {out / 'figures'}"
    )

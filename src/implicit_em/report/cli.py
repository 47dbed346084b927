"""`implicit-em report`: run the claims report and print where the page is."""

from __future__ import annotations

from pathlib import Path

import torch
import typer

from implicit_em.report.build import run_report


def report_command(
    quick: bool = typer.Option(False, "--quick", help="The default size: minutes on a laptop CPU."),
    full: bool = typer.Option(
        False, "--full", help="The publication size: more seeds, larger data (hours on a CPU)."
    ),
    smoke: bool = typer.Option(False, "--smoke", help="Seconds per experiment; for tests."),
    only: str = typer.Option("", "--only", help="Comma-separated experiment ids, e.g. E2,E5."),
    out: Path = typer.Option(
        Path("report"), "--out", help="Output folder (cache, figures, index.html)."
    ),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    force: bool = typer.Option(False, "--force", help="Ignore cached results and rerun."),
) -> None:
    """Run every experiment of the claims report and write report/index.html."""
    if quick + full + smoke > 1:
        _fail("choose one of --quick, --full and --smoke")
    size = "full" if full else "smoke" if smoke else "quick"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        _fail(f"--device must be 'cpu' or 'cuda', got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        _fail("--device cuda: no CUDA device is available on this machine")
    ids = [i for i in only.split(",") if i.strip()] or None
    try:
        report = run_report(ids, size=size, out=out, device=device, force=force, log=typer.echo)
    except ValueError as err:
        _fail(str(err))
    tally: dict[str, int] = {}
    for result in report.results:
        tally[result.judgement.verdict] = tally.get(result.judgement.verdict, 0) + 1
    typer.echo(", ".join(f"{n} {v}" for v, n in tally.items()))
    typer.echo(f"report: {report.html.resolve()}")
    if report.failed_to_run:
        typer.echo(f"error: {', '.join(report.failed_to_run)} crashed (see the report)", err=True)
        raise typer.Exit(code=1)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)

"""`implicit-em report`: run the claims report and print where the page is.

Every argument is checked before any experiment runs; a bad one is one line naming the option
and exit status 2.
"""

from __future__ import annotations

from pathlib import Path

import typer

from implicit_em.arguments import check_device, check_writable_folder, fail, names
from implicit_em.report.build import run_report
from implicit_em.report.registry import select

_IDS = ", ".join(e.id for e in select())


def report_command(
    quick: bool = typer.Option(False, "--quick", help="The default size: minutes on a laptop CPU."),
    full: bool = typer.Option(
        False, "--full", help="The publication size: more seeds, larger data (hours on a CPU)."
    ),
    smoke: bool = typer.Option(False, "--smoke", help="Seconds per experiment; for tests."),
    only: list[str] = typer.Option(
        None,
        "--only",
        metavar="IDS",
        help=f"Run only these experiments, comma-separated or repeated: {_IDS}.",
    ),
    out: Path = typer.Option(
        Path("report"), "--out", help="Output folder (cache, figures, index.html)."
    ),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    force: bool = typer.Option(False, "--force", help="Ignore cached results and rerun."),
) -> None:
    """Run every experiment of the claims report and write report/index.html."""
    if quick + full + smoke > 1:
        fail("choose one of --quick, --full and --smoke")
    size = "full" if full else "smoke" if smoke else "quick"
    check_device(device)
    ids = names(only)
    try:
        select(ids)
    except ValueError as err:
        fail(f"--only: {err}")
    check_writable_folder(out, "--out")
    try:
        report = run_report(ids, size=size, out=out, device=device, force=force, log=typer.echo)
    except ValueError as err:
        fail(str(err))
    tally: dict[str, int] = {}
    for result in report.results:
        tally[result.judgement.verdict] = tally.get(result.judgement.verdict, 0) + 1
    typer.echo(", ".join(f"{n} {v}" for v, n in tally.items()))
    typer.echo(f"report: {report.html.resolve()}")
    if report.failed_to_run:
        typer.echo(f"error: {', '.join(report.failed_to_run)} crashed (see the report)", err=True)
        raise typer.Exit(code=1)

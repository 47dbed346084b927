"""`implicit-em trace`: commands on traced runs (`report`: the health page of a run)."""

from __future__ import annotations

from pathlib import Path

import typer

from implicit_em.trace.page import RunFileError, health_page, read_run

__all__ = ["trace_app"]

trace_app = typer.Typer(
    name="trace",
    help="Commands on traced runs.",
    no_args_is_help=True,
    add_completion=False,
)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


@trace_app.command("report")
def report(
    run: Path = typer.Argument(..., help="The run's JSON Lines file (a tracer's jsonl sink)."),
    out: Path = typer.Option(Path("trace-report"), help="Output folder for index.html."),
    partial: bool = typer.Option(
        False, "--partial", help="At a truncated or corrupt line, show the records before it."
    ),
    top_k: int = typer.Option(5, "--top-k", min=1, help="Worst sites listed per site type."),
) -> None:
    """Write one self-contained HTML page (figures embedded) on the health of a traced run."""
    try:
        loaded = read_run(run, partial=partial)
    except RunFileError as err:
        _fail(f"{err}; --partial shows the records before it")
    except OSError as err:
        _fail(f"RUN {run}: cannot be read ({err.strerror})")
    if not len(loaded.history):
        _fail(f"RUN {run}: no tracer record in the file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _fail(f"--out {out}: not a writable folder ({err.strerror})")
    target = out / "index.html"
    target.write_text(health_page(loaded, top_k=top_k), encoding="utf-8")
    if loaded.error is not None:
        typer.echo(f"partial: {loaded.error}", err=True)
    typer.echo(f"wrote {target} ({len(loaded.history)} records)")

"""The `implicit-em` command.

Each subcommand lives beside the code it drives and is registered here, so this module stays a
table of contents: `report` (the claims report), `publish` (a full-size report into
`results/full/`), `verify` (the executable identities), `fit` (Gaussian mixtures), `trace-demo`
(the tracer on digits), `trace report` (the health page of a traced run) and `windtunnel` (the
Bayesian wind tunnel). `implicit-em --help` and `implicit-em COMMAND --help` list the options;
`implicit-em --version` prints the version. Bad input is one line, `error: ...`, and exit
status 2 (see `arguments`).
"""

from __future__ import annotations

import json

import typer

from implicit_em import __version__, identities
from implicit_em.arguments import SEED_RANGE, OneLineErrors, PlainUsage, fail, names, needs_extra
from implicit_em.mixture.cli import fit_command
from implicit_em.report.cli import publish_command, register_command, report_command
from implicit_em.trace.cli import trace_app
from implicit_em.trace.demo import trace_demo
from implicit_em.windtunnel.cli import windtunnel

app = typer.Typer(
    name="implicit-em",
    help="Gradient descent as implicit EM: identities, mixtures, tracing, wind tunnel.",
    no_args_is_help=True,
    add_completion=False,
    cls=OneLineErrors,
    rich_markup_mode=None,
)


_IDENTITIES = ", ".join(identities.REGISTRY)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"implicit-em {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Gradient descent as implicit EM: identities, mixtures, tracing, wind tunnel."""


@app.command(cls=PlainUsage, short_help="Check the executable identities against autograd.")
def verify(
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    seed: int = typer.Option(0, **SEED_RANGE, help="Seed of the random inputs."),
    only: list[str] = typer.Option(
        None,
        "--only",
        metavar="NAMES",
        help=f"Check only these identities, comma-separated or repeated: {_IDENTITIES}.",
    ),
) -> None:
    """Check every executable identity against autograd in float64; exit 1 on any failure."""
    selected = names(only)
    unknown = [n for n in selected or () if n not in identities.REGISTRY]
    if unknown:
        fail(
            f"--only: unknown identities {', '.join(unknown)}; known: {', '.join(identities.REGISTRY)}"
        )
    results = identities.run_all(seed=seed, names=selected)
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        header = f"{'identity':<24} {'section':<11} {'claims':<10} {'max abs error':>14}  gradcheck  pass"
        typer.echo(header)
        typer.echo("-" * len(header))
        for r in results:
            typer.echo(
                f"{r.name:<24} {r.section:<11} {r.claims:<10} {r.max_abs_error:>14.3e}  "
                f"{'ok' if r.gradcheck else 'FAIL':<9}  {'PASS' if r.passed else 'FAIL'}"
            )
        failed = sum(not r.passed for r in results)
        typer.echo(
            f"\n{len(results) - failed} passed, {failed} failed (tolerance {identities.TOLERANCE:g})"
        )
    if not all(r.passed for r in results):
        raise typer.Exit(code=1)


# Each command with the summary `implicit-em --help` lists (whole, not cut to the width) and
# the optional dependencies it checks before any work.
app.command("report", cls=PlainUsage, short_help="Run the claims report; write its page.")(
    needs_extra("report", "report", ["matplotlib", "entmax", "cleanlab", "crowdkit"])(
        report_command
    )
)
app.command("publish", cls=PlainUsage, short_help="Publish a full-size report, or check it.")(
    publish_command
)
app.command(
    "register", cls=PlainUsage, short_help="Register the report's protocols, or check them."
)(register_command)
app.command("windtunnel", cls=PlainUsage, short_help="Train on a wind-tunnel task; bits vs Bayes.")(
    needs_extra("windtunnel", "plot", ["matplotlib"])(windtunnel)
)
app.command("fit", cls=PlainUsage, short_help="Fit a Gaussian mixture to a file, or predict.")(
    fit_command
)
app.command("trace-demo", cls=PlainUsage, short_help="Trace a small classifier on digits.")(
    needs_extra("trace-demo", "trace", ["tensorboard", "matplotlib"])(trace_demo)
)
for _command in trace_app.registered_commands:  # `trace report` draws with matplotlib
    _command.cls = PlainUsage
    _command.short_help = "Write the health page of a traced run."
    _command.callback = needs_extra("trace report", "trace", ["matplotlib"])(_command.callback)
app.add_typer(trace_app, name="trace", short_help="Commands on traced runs: `trace report`.")


def main() -> None:
    app()


if __name__ == "__main__":
    main()

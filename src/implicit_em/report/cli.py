"""`implicit-em report`: run the claims report and print where the page is; `implicit-em
publish`: publish a finished full-size report into `results/full/`, check the published one, or
judge its samples again under changed rules (`--rejudge`);
`implicit-em register`: register the experiments' protocols (or check that they are).

Every argument is checked before any experiment runs; a bad one is one line naming the option
and exit status 2. Ctrl-C during a report is one line saying what was kept and the command
that resumes, and exit status 130.
"""

from __future__ import annotations

from pathlib import Path

import typer

from implicit_em.arguments import check_device, check_writable_folder, fail, names
from implicit_em.report.judging.rejudge import rejudge_folder, rejudge_publication
from implicit_em.report.judging.replication import replication
from implicit_em.report.publishing.freshness import (
    LEGACY,
    REJUDGE,
    published_document,
    stale_experiments,
)
from implicit_em.report.publishing.publish import PUBLISHED, publish
from implicit_em.report.publishing.superseded import read_superseded, supersede, uncovered
from implicit_em.report.rendering.render import NO_FULL_RUN
from implicit_em.report.rules.registration import now, register, unregistered
from implicit_em.report.running.build import PUBLISHED_FULL, run_report
from implicit_em.report.running.executors import check_executor, make_executor
from implicit_em.report.running.provenance import source_commit
from implicit_em.report.running.registry import select
from implicit_em.report.running.runner import Interrupted

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
    rejudge: bool = typer.Option(
        False,
        "--rejudge",
        help="Run nothing: judge --out's results.json again under the current protocols and "
        "item rules, and write its page and summary again.",
    ),
    seeds: str = typer.Option(
        None,
        "--seeds",
        metavar="SEEDS",
        help="Replicate on these seeds instead of each experiment's own, e.g. 2000-2009 or "
        "2000,2003: the page marks the run as a replication and compares it with the published one.",
    ),
    seed_offset: int = typer.Option(
        None,
        "--seed-offset",
        metavar="N",
        help="Replicate with every experiment's seeds shifted by N (its seed count kept).",
    ),
    executor: str = typer.Option(
        "local",
        "--executor",
        help="Where units run: local (this process) or ray (a Ray cluster; the extra 'ray').",
    ),
    address: str = typer.Option(
        None,
        "--address",
        metavar="ADDRESS",
        help="With --executor ray: join this cluster (auto or HOST:PORT); without it a local "
        "Ray instance starts with one worker per core.",
    ),
) -> None:
    """Run every experiment of the claims report and write report/index.html."""
    if rejudge:
        _rejudge(out)
        return
    if quick + full + smoke > 1:
        fail("choose one of --quick, --full and --smoke")
    size = "full" if full else "smoke" if smoke else "quick"
    device = check_device(device)
    ids = names(only)
    try:
        select(ids)
    except ValueError as err:
        fail(f"--only: {err}")
    try:
        picked = replication(seeds, seed_offset)
        check_executor(executor, address)
    except ValueError as err:
        fail(str(err))
    check_writable_folder(out, "--out")
    try:
        runner = make_executor(executor, address)
    except ValueError as err:
        fail(str(err))
    try:
        report = run_report(
            ids,
            size=size,
            out=out,
            device=device,
            force=force,
            log=typer.echo,
            replication=picked,
            executor=runner,
        )
    except ValueError as err:
        fail(str(err))
    except Interrupted as stop:
        typer.echo(_interrupted_line(stop, size, out, ids, device, seeds, seed_offset), err=True)
        raise typer.Exit(code=130) from None
    finally:
        runner.close()
    tally: dict[str, int] = {}
    for result in report.results:
        tally[result.judgement.verdict] = tally.get(result.judgement.verdict, 0) + 1
    typer.echo(", ".join(f"{n} {v}" for v, n in tally.items()))
    typer.echo(f"report: {report.html.resolve()}")
    if report.failed_to_run:
        typer.echo(f"error: {', '.join(report.failed_to_run)} crashed (see the report)", err=True)
        raise typer.Exit(code=1)


def _rejudge(out: Path) -> None:
    """`report --rejudge`: the report in `out` judged again, without running anything."""
    if not (out / "results.json").is_file():
        fail(f"--out: {out} holds no results.json to rejudge")
    try:
        path = rejudge_folder(out, PUBLISHED_FULL)
    except (ValueError, KeyError, OSError) as err:
        fail(f"--out: {out / 'results.json'} cannot be rejudged ({err})")
    typer.echo(f"rejudged: {path.resolve()}")


def _interrupted_line(
    stop: Interrupted,
    size: str,
    out: Path,
    ids: list[str] | None,
    device: str,
    seeds: str | None = None,
    seed_offset: int | None = None,
) -> str:
    """What a Ctrl-C kept, and the command that resumes (the same size, output, selection,
    device and seeds)."""
    kept = f"{len(stop.kept)} finished experiment(s) kept in {out / 'cache'}"
    units = f", and {stop.running}'s finished units in {out / 'units'}" if stop.running else ""
    command = ["implicit-em report", f"--{size}", f"--out {out}"]
    command += [f"--only {','.join(ids)}"] if ids else []
    command += [f"--device {device}"] if device != "cpu" else []
    command += [f"--seeds {seeds}"] if seeds is not None else []
    command += [f"--seed-offset {seed_offset}"] if seed_offset is not None else []
    return f"interrupted: {kept}{units}; resume with: {' '.join(command)}"


def publish_command(
    source: Path = typer.Option(
        None, "--from", help="The --out folder of a finished `implicit-em report --full`."
    ),
    to: Path = typer.Option(PUBLISHED, "--to", help="Where the published report lives."),
    partial: bool = typer.Option(
        False,
        "--partial",
        help="Publish a run with missing, not run or invalid experiments, marked as partial.",
    ),
    readme: Path = typer.Option(
        Path("README.md"),
        "--readme",
        help="The README whose claim table gets the full-size column (skipped when absent).",
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="Publish nothing: say whether the published experiments match the current source.",
    ),
    allow_legacy: bool = typer.Option(
        False,
        "--allow-legacy",
        help="With --check: list, but do not fail on, experiments published before "
        "measurement keys were recorded.",
    ),
    rejudge_: bool = typer.Option(
        False,
        "--rejudge",
        help="Judge the published samples again where only judging code or rules changed.",
    ),
    supersede_: str = typer.Option(
        None,
        "--supersede",
        metavar="REASON",
        help="Mark the published run superseded by the current code until it is rerun: "
        "--check then passes while only the experiments stale now are stale.",
    ),
) -> None:
    """Publish a finished full-size report into results/full (or check the published one)."""
    if sum((check, rejudge_, supersede_ is not None)) > 1:
        fail("choose one of --check, --rejudge and --supersede")
    if allow_legacy and not check:
        fail("--allow-legacy: only with --check")
    if check:
        _check_published(to, allow_legacy)
        return
    if supersede_ is not None:
        _supersede_published(to, supersede_)
        return
    if rejudge_:
        _rejudge_published(to)
        return
    if source is None:
        fail("--from: expected the --out folder of a finished `implicit-em report --full`")
    if not source.is_dir():
        fail(f"--from {source}: not a folder")
    check_writable_folder(to, "--to")
    try:
        publication = publish(
            source, to, partial=partial, readme=readme if readme.is_file() else None
        )
    except ValueError as err:
        fail(str(err))
    state = f"partial: {'; '.join(publication.gaps)}" if publication.gaps else "complete"
    typer.echo(f"published {source} into {publication.folder} ({state})")
    if publication.readme is None:
        typer.echo(f"{readme} not found: no README claim table was updated")
    else:
        typer.echo(f"{publication.readme}: full-size column updated")


def _check_published(folder: Path, allow_legacy: bool = False) -> None:
    try:
        document = published_document(folder)
    except ValueError as err:
        fail(str(err))
    if document is None:
        typer.echo(f"{folder}: {NO_FULL_RUN}")
        return
    stale = stale_experiments(document)
    for entry in stale:
        typer.echo(f"stale: {entry}")
    legacy = [s.id for s in stale if s.reason == LEGACY]
    if allow_legacy and legacy and len(legacy) == len(stale):
        typer.echo(
            f"{folder}: {len(legacy)} experiment(s) published before measurement keys, listed "
            "above; allowed by --allow-legacy, but stale until rerun and published again"
        )
        return
    if stale:
        kinds = [s.kind for s in stale]
        typer.echo(
            f"{folder}: {kinds.count('measurement')} measurement-stale (rerun at full size), "
            f"{kinds.count('judgement')} judgement-stale (`{REJUDGE}`)"
        )
        try:
            record = read_superseded(folder)
        except ValueError as err:
            fail(str(err))
        if record is not None and not uncovered(record, [s.id for s in stale]):
            typer.echo(f"{folder}: {record}")
            return
        if record is not None:
            newly = ", ".join(uncovered(record, [s.id for s in stale]))
            typer.echo(f"{folder}: stale since it was marked superseded: {newly}")
        raise typer.Exit(code=1)
    typer.echo(f"{folder}: every published experiment matches the current source")


def _supersede_published(folder: Path, reason: str) -> None:
    try:
        document = published_document(folder)
    except ValueError as err:
        fail(str(err))
    if document is None:
        fail(f"--to {folder}: {NO_FULL_RUN}")
    stale = [s.id for s in stale_experiments(document)]
    try:
        path = supersede(folder, reason, stale, source_commit(), now())
    except ValueError as err:
        fail(str(err))
    typer.echo(f"{path}: {read_superseded(folder)}")


def _rejudge_published(folder: Path) -> None:
    try:
        done = rejudge_publication(folder)
    except ValueError as err:
        fail(str(err))
    if done:
        typer.echo(f"{folder}: judged again (now exploratory): {', '.join(done)}")
    else:
        typer.echo(f"{folder}: no experiment is judgement-stale; nothing judged again")


def register_command(
    reason: str = typer.Option(
        "", "--reason", help="Why a registered protocol changed (needed for an amendment)."
    ),
    after_data: bool = typer.Option(
        False,
        "--after-data",
        help="The amendment was made after confirmatory data of the protocol were seen.",
    ),
    seen: str = typer.Option("", "--seen", help="With --after-data: what the data showed."),
    seeds_seen: str = typer.Option(
        "", "--seeds-seen", metavar="SEEDS", help="With --after-data: the seeds seen, e.g. 0,1,2."
    ),
    check: bool = typer.Option(
        False, "--check", help="Register nothing: list the protocols not registered (exit 1)."
    ),
) -> None:
    """Register each experiment's current protocol (protocols/registry.json) before a run."""
    protocols = [e.protocol for e in select()]
    todo = unregistered(protocols)
    if check:
        hashes = {p.id: p.hash for p in protocols}
        for ident in todo:
            typer.echo(f"not registered: {ident} (protocol {hashes[ident]})")
        if todo:
            raise typer.Exit(code=1)
        typer.echo(f"every protocol is registered ({len(protocols)})")
        return
    try:
        seeds = [int(s) for s in seeds_seen.split(",") if s.strip()]
    except ValueError:
        fail(f"--seeds-seen {seeds_seen!r}: expected whole numbers separated by commas")
    try:
        done = register(protocols, reason, after_data, seen, seeds)
    except ValueError as err:
        fail(str(err))
    typer.echo(f"registered: {', '.join(done)}" if done else "every protocol was registered")

"""Publishing a full-size report, and telling when a published one has gone stale.

The publisher and the freshness check run on real full-size reports of small synthetic
experiments, each defined in its own module file under the test's folder, so that editing that
file changes the experiment's source exactly as editing an experiment module would.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import implicit_em.report.publishing.publish as publishing
from implicit_em.cli import app
from implicit_em.report import Experiment
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.publishing.freshness import (
    published_document,
    refresh_command,
    stale_experiments,
)
from implicit_em.report.publishing.publish import publish
from implicit_em.report.rules import registration as reg
from implicit_em.report.rules.protocol import Protocol
from implicit_em.report.running.build import published_seconds, work_key, write_report
from implicit_em.report.running.registry import select
from implicit_em.report.running.runner import run_experiments

QUIET = {"log": lambda line: None}

_MODULE = """
from implicit_em.report import Outcome


def plan(config):
    return []


def aggregate(config, results, out):
    if config.get("crash"):
        raise RuntimeError("boom")
    return Outcome({{"x": 0.5}}, {{"x": [0.5, 0.4, 0.6]}})  # {name}
"""


def _protocol(id_: str, full: dict | None = None) -> Protocol:
    criterion = {"number": "x", "op": "<=", "threshold": 1.0, "means": "small"}
    return Protocol.from_data(
        {
            "id": id_,
            "criteria": [{**criterion, "claim": "C1", "direction": "supports", "primary": True}],
            "sizes": {
                "smoke": {"seeds": [0]},
                "quick": {"seeds": [0, 1]},
                "full": full or {"seeds": [1000, 1001, 1002]},
                "control": {"seeds": [0]},
            },
        }
    )


def _experiment(folder: Path, id_: str, full: dict | None = None) -> Experiment:
    """An experiment whose `plan` and `aggregate` live in its own module file `folder/<id>_run.py`."""
    path = folder / f"{id_.lower()}_run.py"
    path.write_text(_MODULE.format(name=id_), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"_publish_test_{id_}_{folder.name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # found by inspect, which the runner reads the source through
    spec.loader.exec_module(module)
    return Experiment(
        id=id_,
        title=f"synthetic {id_}",
        claims=("C1",),
        hypothesis="h",
        setup="s",
        plan=module.plan,
        aggregate=module.aggregate,
        protocol=_protocol(id_, full),
        controls={
            "x": Controls(
                Control("x planted small", lambda config: [0.5, 0.4, 0.6]),
                Control("x planted large", lambda config: [2.0, 2.2, 1.9]),
            )
        },
        headline=("x",),
        meaning={"holds": "a", "partly": "b", "fails": "c"},
        minutes={"smoke": 0.1, "quick": 1.0, "full": 12.0},
    )


def _report(out: Path, experiments: list[Experiment], size: str = "full") -> Path:
    results = run_experiments(experiments, size, out, **QUIET)
    write_report(results, size, out, published=None)
    return out


def clean_checkout(folder: Path) -> Path:
    """A git checkout of a (tiny) implicit-em with nothing uncommitted: what `publish` needs."""
    (folder / "src" / "implicit_em").mkdir(parents=True)
    (folder / "src" / "implicit_em" / "__init__.py").write_text('__version__ = "0"\n')
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a clean checkout"],
    ):
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)
    return folder


@pytest.fixture
def two(tmp_path, monkeypatch) -> list[Experiment]:
    """Two synthetic experiments whose protocols are registered (in a registry of the test's
    own) before anything runs, published from a clean checkout of the test's own."""
    experiments = [_experiment(tmp_path, "X1"), _experiment(tmp_path, "X2")]
    monkeypatch.setattr(publishing, "CHECKOUT", clean_checkout(tmp_path / "checkout"))
    monkeypatch.setattr(reg, "REGISTRY", tmp_path / "registry.json")
    reg.register([e.protocol for e in experiments], when="2026-01-01 00:00:00 UTC")
    return experiments


def test_a_complete_full_run_is_published_with_its_provenance_and_is_fresh(tmp_path, two):
    source = _report(tmp_path / "run", two)
    dest = tmp_path / "results" / "full"
    publication = publish(source, dest, experiments=two)
    assert publication.gaps == [] and publication.folder == dest
    assert {p.name for p in dest.iterdir()} == {"results.json", "summary.md", "index.html"}
    document = published_document(dest)
    assert document["meta"]["publication"]["partial"] is False
    for entry in document["experiments"]:
        assert entry["size"] == "full" and entry["seeds"] == [1000, 1001, 1002]
        assert entry["commit"] and entry["machine"] == document["meta"]["machine"]
        assert entry["seconds"] >= 0 and len(entry["key"]) == 16
    assert "PARTIAL" not in (dest / "summary.md").read_text()
    page = (dest / "index.html").read_text()
    key = document["experiments"][0]["key"]
    assert "Size full; 3 seeds; measured time" in page and f"cache key {key}" in page
    assert "| X1: synthetic X1 | **holds** |" in (dest / "summary.md").read_text()
    assert stale_experiments(document, two) == []
    publication = document["meta"]["publication"]
    assert publication["clean"] is True and len(publication["commit"]) == 12
    assert f"published from commit {publication['commit']} (clean tree)" in page


def test_a_dirty_checkout_is_refused_in_one_line(tmp_path, two):
    source = _report(tmp_path / "run", two)
    (publishing.CHECKOUT / "src" / "implicit_em" / "new.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match=r"^publish: the checkout .* is not clean \(src/"):
        publish(source, tmp_path / "dest", experiments=two)
    assert not (tmp_path / "dest").exists()


def test_a_changed_source_makes_its_experiment_stale_and_names_the_command(tmp_path, two):
    dest = tmp_path / "published"
    publish(_report(tmp_path / "run", two), dest, experiments=two)
    module = tmp_path / "x1_run.py"
    module.write_text(module.read_text() + "\nTHRESHOLD = 2\n", encoding="utf-8")
    stale = stale_experiments(published_document(dest), two)
    assert [s.id for s in stale] == ["X1"]
    assert str(stale[0]).startswith(f"X1: measurement-stale: {module} changed; refresh with")
    assert stale[0].command == (
        "implicit-em report --full --out report/full && implicit-em publish --from report/full"
    )


def test_a_changed_full_configuration_makes_its_experiment_stale(tmp_path, two):
    dest = tmp_path / "published"
    publish(_report(tmp_path / "run", two), dest, experiments=two)
    fewer = _protocol("X2", {"seeds": [1000, 1001]})
    changed = [two[0], replace(two[1], protocol=fewer)]
    stale = stale_experiments(published_document(dest), changed)
    assert [s.id for s in stale] == ["X2"]
    removed = stale_experiments(published_document(dest), two[:1])
    assert [(s.id, s.reason) for s in removed] == [
        ("X2", "is no longer an experiment of the report")
    ]


def test_a_stale_or_smaller_report_is_refused(tmp_path, two):
    smoke = _report(tmp_path / "smoke", two, size="smoke")
    with pytest.raises(ValueError, match=r"a smoke report, not a full-size run"):
        publish(smoke, tmp_path / "dest", experiments=two)
    source = _report(tmp_path / "run", two)
    module = tmp_path / "x2_run.py"
    module.write_text(module.read_text() + "\n# a comment is not code\n", encoding="utf-8")
    assert stale_experiments(published_document(source), two) == []
    module.write_text(module.read_text() + "\nEDITED = 1\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"X2 \(measurement\) changed since the run .*rerun: implicit-em report"
    ):
        publish(source, tmp_path / "dest", experiments=two)
    with pytest.raises(ValueError, match=r"no results\.json"):
        publish(tmp_path / "nothing", tmp_path / "dest", experiments=two)
    assert not (tmp_path / "dest").exists()


def test_an_incomplete_run_needs_partial_and_is_marked_partial(tmp_path, two):
    crashing = _experiment(tmp_path, "X3", full={"seeds": [1000], "crash": True})
    reg.register([crashing.protocol])
    registry = [*two, crashing, _experiment(tmp_path, "X4")]
    source = _report(tmp_path / "run", [*two, crashing])
    with pytest.raises(
        ValueError, match=r"not a complete full run \(X4 not in the run; X3 not run\)"
    ):
        publish(source, tmp_path / "dest", experiments=registry)
    assert not (tmp_path / "dest").exists()
    publication = publish(source, tmp_path / "dest", partial=True, experiments=registry)
    assert publication.gaps == ["X4 not in the run", "X3 not run"]
    document = published_document(tmp_path / "dest")
    assert document["meta"]["publication"]["partial"] is True
    for name in ("summary.md", "index.html"):
        text = (tmp_path / "dest" / name).read_text()
        assert "PARTIAL run: X4 not in the run; X3 not run" in text, name
    assert "claims report (partial)</h1>" in (tmp_path / "dest" / "index.html").read_text()
    stale = stale_experiments(document, registry)
    assert stale == []


def test_the_cli_refuses_a_report_that_is_not_full_size_in_one_line(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(
        json.dumps({"meta": {"size": "quick"}, "experiments": []})
    )
    source, dest = tmp_path / "run", tmp_path / "dest"
    done = CliRunner().invoke(app, ["publish", "--from", str(source), "--to", str(dest)])
    assert done.exit_code == 2
    (line,) = done.stderr.strip().splitlines()
    assert line == f"error: --from {source}: a quick report, not a full-size run"
    assert not (tmp_path / "dest").exists()


def test_the_announcement_names_each_experiment_with_its_expected_time(tmp_path, two):
    lines: list[str] = []
    run_experiments(two, "full", tmp_path, log=lines.append)
    assert lines[0].endswith("2 to run (about 24 min: budgets for X1, X2)")
    assert lines[1:3] == [  # then, off a terminal, a plain line per experiment
        "  X1   about 12 min  (budget) synthetic X1",
        "  X2   about 12 min  (budget) synthetic X2",
    ]
    again: list[str] = []
    run_experiments(two, "full", tmp_path, log=again.append)
    assert again[:2] == [
        "2 experiment(s) at size 'full', 0 to run",
        f"resuming: 2 finished experiment(s) read from {tmp_path / 'cache'}",
    ]


def test_the_announcement_states_the_published_times_where_there_are_some(tmp_path, two):
    document = {
        "experiments": [
            {"id": "X1", "size": "full", "seconds": 95.0},
            {"id": "X2", "size": "quick", "seconds": 3.0},  # another size: not a measurement
        ]
    }
    measured = published_seconds(document, "full")
    assert measured == {"X1": 95.0}
    lines: list[str] = []
    run_experiments(two, "full", tmp_path, log=lines.append, measured=measured)
    assert lines[0].endswith("2 to run (about 14 min: budgets for X2)")
    assert lines[1:3] == [
        "  X1   about 2 min   synthetic X1",
        "  X2   about 12 min  (budget) synthetic X2",
    ]
    assert published_seconds(None, "full") == {}


def test_a_measured_time_counts_only_for_the_same_work(two):
    """A published time announces an experiment only when it computed what the experiment
    computes now: the same configuration, whatever its seeds or device; another configuration
    (a task made larger, say) is announced by its budget."""
    now = two[0].configs["full"]
    document = {
        "experiments": [
            {"id": "X1", "size": "full", "seconds": 95.0, "config": {**now, "device": "cuda"}},
            {"id": "X2", "size": "full", "seconds": 7.0, "config": {**now, "larger": True}},
        ]
    }
    assert published_seconds(document, "full", two) == {"X1": 95.0}
    other_seeds = {**now, "seeds": [s + 30000 for s in now["seeds"]]}
    assert work_key(other_seeds) == work_key(now) != work_key({**now, "seeds": now["seeds"][:1]})
    recorded = {
        "experiments": [{"id": "X1", "size": "full", "seconds": 9.0, "work": work_key(now)}]
    }
    assert published_seconds(recorded, "full", two) == {"X1": 9.0}
    unknown = {"experiments": [{"id": "X1", "size": "full", "seconds": 9.0}]}  # nothing recorded
    assert published_seconds(unknown, "full", two) == {}
    assert published_seconds(unknown, "full") == {"X1": 9.0}


def test_the_cli_check_says_what_is_stale_and_exits_1(tmp_path, two):
    dest = tmp_path / "published"
    runner = CliRunner()
    nothing = runner.invoke(app, ["publish", "--check", "--to", str(dest)])
    assert nothing.exit_code == 0 and nothing.stdout.strip() == f"{dest}: no full run published"
    publish(_report(tmp_path / "run", two), dest, experiments=two)
    done = runner.invoke(app, ["publish", "--check", "--to", str(dest)])
    assert done.exit_code == 1  # X1 and X2 are not experiments of the report's registry
    assert done.stdout.splitlines()[0] == (
        "stale: X1: measurement-stale: is no longer an experiment of the report; refresh with "
        "`implicit-em report --full --out report/full && "
        "implicit-em publish --from report/full`"
    )


def test_the_refresh_command_keeps_the_publication_s_experiments_device_and_partial():
    assert refresh_command(["E1", "E2"], "cuda", partial=True, all_ids=["E1", "E2", "E3"]) == (
        "implicit-em report --full --only E1,E2 --device cuda --out report/full && "
        "implicit-em publish --from report/full --partial"
    )
    assert refresh_command(["E1", "E2"], all_ids=["E1", "E2"]) == (
        "implicit-em report --full --out report/full && implicit-em publish --from report/full"
    )


def test_publishing_fills_the_readme_column_or_refuses_a_readme_without_one(tmp_path, two):
    source = _report(tmp_path / "run", two)
    readme = tmp_path / "README.md"
    readme.write_text((Path(__file__).resolve().parents[2] / "README.md").read_text())
    publish(source, tmp_path / "dest", readme=readme, experiments=two)
    text = readme.read_text()
    # the README's short table: item, statement, quick verdict, full-size verdict, direction
    # (the items read under the item rules: X1's criterion on C1 is not one C1's rule reads)
    quick = r"\*\*[a-z ()]+\*\*(?: \(exploratory\))?"  # the quick verdict, as the README has it
    row = rf"^\| C1 \| [^|]+ \| {quick} \| \*\*not tested \(not measured\)\*\* \|"
    assert re.search(row, text, flags=re.M)
    assert re.search(rf"^\| C3 \| [^|]+ \| {quick} \| \*\*not tested ", text, re.M)
    plain = tmp_path / "plain.md"
    plain.write_text("# No claim table\n")
    with pytest.raises(ValueError, match=r"--readme .*plain\.md: no claim table to fill"):
        publish(source, tmp_path / "elsewhere", readme=plain, experiments=two)
    assert not (tmp_path / "elsewhere").exists()


def test_publish_refuses_a_run_whose_protocol_was_registered_late_or_never(
    tmp_path, two, monkeypatch
):
    source = _report(tmp_path / "run", two)
    late = tmp_path / "late.json"
    monkeypatch.setattr(reg, "REGISTRY", late)
    reg.register([e.protocol for e in two], when="2999-01-01 00:00:00 UTC")
    with pytest.raises(ValueError, match=r"X1: protocol \w+ was registered 2999-01-01"):
        publish(source, tmp_path / "dest", experiments=two)
    monkeypatch.setattr(reg, "REGISTRY", tmp_path / "empty.json")
    with pytest.raises(ValueError, match="never registered"):
        publish(source, tmp_path / "dest", experiments=two)
    assert not (tmp_path / "dest").exists()


def test_a_cached_result_whose_measurement_changed_is_measured_again(tmp_path, two):
    lines: list[str] = []
    run_experiments(two, "smoke", tmp_path, log=lines.append)
    (entry,) = (tmp_path / "cache").glob("X1-*.json")
    cached = json.loads(entry.read_text())
    assert cached["measurement"]["modules"]  # its own module at least
    cached["measurement"]["versions"]["numpy"] = "0.0.1"  # as if measured with another numpy
    entry.write_text(json.dumps(cached))
    again: list[str] = []
    run_experiments(two, "smoke", tmp_path, log=again.append)
    assert again[0] == "2 experiment(s) at size 'smoke', 1 to run (about 6.0 s: budgets for X1)"


def test_the_cli_rejudge_says_what_it_did_or_why_not(tmp_path, two):
    runner = CliRunner()
    missing = runner.invoke(app, ["publish", "--rejudge", "--to", str(tmp_path / "none")])
    assert missing.exit_code == 2
    assert missing.stderr.strip() == (
        f"error: --to {tmp_path / 'none'}: no published report to judge again"
    )
    both = runner.invoke(app, ["publish", "--rejudge", "--check"])
    assert both.exit_code == 2 and "choose one of --check, --rejudge and --supersede" in both.stderr


def test_the_cli_check_lists_legacy_entries_and_fails_unless_allowed(tmp_path):
    (e1,) = select(["E1"])
    dest = tmp_path / "published"
    dest.mkdir()
    legacy = {"id": "E1", "size": "full", "config": {**e1.configs["full"], "device": "cpu"}}
    document = {"meta": {"size": "full"}, "experiments": [legacy]}
    (dest / "results.json").write_text(json.dumps(document))
    runner = CliRunner()
    strict = runner.invoke(app, ["publish", "--check", "--to", str(dest)])
    assert strict.exit_code == 1
    assert strict.stdout.startswith(
        "stale: E1: measurement-stale: measurement key not recorded: published before "
        "measurement keys; rerun; refresh with"
    )
    allowed = runner.invoke(app, ["publish", "--check", "--allow-legacy", "--to", str(dest)])
    assert allowed.exit_code == 0
    assert allowed.stdout.splitlines()[0] == strict.stdout.splitlines()[0]  # still listed
    assert "1 experiment(s) published before measurement keys" in allowed.stdout
    alone = runner.invoke(app, ["publish", "--allow-legacy", "--to", str(dest)])
    assert alone.exit_code == 2 and "--allow-legacy: only with --check" in alone.stderr


def test_a_rerun_after_a_change_on_seeds_already_seen_is_exploratory(tmp_path, two):
    publish(_report(tmp_path / "run", two), tmp_path / "dest", experiments=two)
    seen = reg.read_registry()["X1"]["data_seen"]["full"]
    assert seen["seeds"] == [1000, 1001, 1002] and len(seen["measurement"]) == 16
    module = tmp_path / "x1_run.py"
    module.write_text(module.read_text() + "\nEDITED = 1\n", encoding="utf-8")
    rerun = {e["id"]: e for e in published_document(_report(tmp_path / "run", two))["experiments"]}
    assert rerun["X1"]["exploratory"] is True and rerun["X2"]["exploratory"] is False
    assert rerun["X1"]["exploratory_reason"].startswith(
        "its measurement (code, data, libraries or configuration) changed after its full data "
        "were first seen"
    )


def test_a_superseded_publication_passes_the_check_only_while_no_other_goes_stale(tmp_path, two):
    """`--supersede` records the stale experiments; `--check` lists them and passes, fails for
    an experiment stale beyond the record, and a new publication removes the record."""
    dest = tmp_path / "published"
    runner = CliRunner()
    publish(_report(tmp_path / "run", two), dest, experiments=two)
    empty = runner.invoke(app, ["publish", "--supersede", " ", "--to", str(dest)])
    assert empty.exit_code == 2 and "--supersede: expected the reason" in empty.output
    marked = runner.invoke(app, ["publish", "--supersede", "judging fixed", "--to", str(dest)])
    assert marked.exit_code == 0, marked.output
    record = json.loads((dest / "superseded.json").read_text())
    assert record["stale"] == ["X1", "X2"] and record["reason"] == "judging fixed"
    passed = runner.invoke(app, ["publish", "--check", "--to", str(dest)])
    assert passed.exit_code == 0 and passed.stdout.count("stale: X") == 2
    assert "superseded since" in passed.stdout.splitlines()[-1]
    (dest / "superseded.json").write_text(json.dumps({**record, "stale": ["X1"]}))
    failed = runner.invoke(app, ["publish", "--check", "--to", str(dest)])
    assert failed.exit_code == 1
    assert failed.stdout.splitlines()[-1].endswith("stale since it was marked superseded: X2")
    publish(_report(tmp_path / "again", two), dest, experiments=two)
    assert not (dest / "superseded.json").exists()

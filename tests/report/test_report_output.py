"""The report's files: the HTML page, results.json, summary.md, caching, resuming and crashes."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import warnings
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from implicit_em.report import (
    VERDICTS,
    Experiment,
    Figure,
    Outcome,
    Unit,
    rebuild,
    run_report,
)
from implicit_em.report.rendering.page import sample_count
from implicit_em.report.rendering.render import NO_FULL_RUN, render_markdown, report_document
from implicit_em.report.rules.protocol import Protocol
from implicit_em.report.running import plan as plan_module
from implicit_em.report.running.build import _published, published_seconds
from implicit_em.report.running.runner import Interrupted, duration, run_experiments

QUIET = {"log": lambda line: None}
SMALL_X = {"number": "x", "op": "<=", "threshold": 1.0, "means": "small"}


class _Page(HTMLParser):
    """Sections, embedded images and summary rows of the report page."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[str] = []
        self.rows: list[list[str]] = []
        self._table = 0
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "table":
            self._table += 1
        elif tag == "tr" and self._table == 3:  # the answers, the claims, the experiments
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return run_report(["E1", "E4"], size="smoke", out=out, published=None, **QUIET), out


def test_html_has_a_section_per_experiment_and_embeds_every_figure(smoke_report):
    report, _ = smoke_report
    page = _Page()
    page.feed(report.html.read_text(encoding="utf-8"))
    assert page.sections == ["E1", "E4"]
    document = json.loads(report.json.read_text())
    figures = [f for e in document["experiments"] for f in e["figures"]]
    assert len(figures) >= 2
    assert len(page.images) == len(figures)
    assert all(src.startswith("data:image/png;base64,") for src in page.images)
    assert len(page.rows) == 2
    for row in page.rows:
        assert row[2].split(" ")[0] in VERDICTS
    text = report.html.read_text()
    assert text.index("Verdict per claim and objection") < text.index("<section")
    assert NO_FULL_RUN in text
    assert (
        'src="http' not in report.html.read_text() and 'href="http' not in report.html.read_text()
    )
    for e in document["experiments"]:  # each names its units and the longest of them
        units = e["units"]
        assert units["count"] >= 1 and units["longest_seconds"] <= units["seconds"]
        assert f"{units['count']} units of work" in text and units["longest"] in text
        for place, used in units["where"].items():  # where they ran: host (device)
            assert f"ran on {place}: {used['units']} unit" in text
            assert used["machines"] and all(m in text for m in used["machines"])
        # their CPU time, measured for every unit, in seconds and CPU-hours
        assert units["cpu_units"] == units["count"] and units["cpu_seconds"] >= 0
        assert f"CPU {units['cpu_seconds']:.1f} s = {units['cpu_hours']:.3g} CPU-hours" in text
        assert len(units["each"]) == units["count"]  # every unit, by name
        for record in units["each"].values():
            assert {"seconds", "cpu_seconds", "host", "device", "machine"} == set(record)
            assert (
                units["machines"][record["machine"]]
                in units["where"][f"{record['host']} ({record['device']})"]["machines"]
            )


def test_results_json_and_summary_agree(smoke_report):
    report, out = smoke_report
    document = json.loads(report.json.read_text())
    assert document["meta"]["size"] == "smoke"
    assert [e["id"] for e in document["experiments"]] == ["E1", "E4"]
    summary = report.markdown.read_text()
    assert summary.index("| item | statement | verdict |") < summary.index(
        "| claims | experiment |"
    )
    assert NO_FULL_RUN in summary
    items = {c["id"]: c for c in document["claim_verdicts"]}
    assert set(items) == set(document["claims"])
    for entry in document["experiments"]:
        for criterion in entry["criteria"]:
            assert entry["id"] in items[criterion["claim"]]["experiments"]
    assert "| item | statement | verdict | full size |" in summary  # below full size
    for item in document["claim_verdicts"]:
        assert set(item["decided_by"]) <= {p["id"] for p in item["parts"]}
        assert {c["experiment"] for c in item["evidence"]} <= set(item["experiments"])
    for entry in document["experiments"]:
        mark = " (exploratory)" if entry["exploratory"] else ""
        verdict = f"**{entry['verdict']}**{mark}"
        cpu = duration(entry["units"]["cpu_seconds"])  # and its units' CPU time
        time_cell = f"{duration(entry['seconds'])} (CPU {cpu})"
        assert f"{verdict} | not published | {time_cell} |" in summary
        assert entry["verdict"] in VERDICTS
        assert entry["rule"] and entry["hypothesis"] and (entry["criteria"] or entry["gates"])
        for gate in entry["gates"]:
            assert set(gate) == {"name", "passed", "detail", "verifies"}
        assert set(entry["protocol"]) == {"hash", "registered", "amendments"}
        assert isinstance(entry["exploratory"], bool) and entry["started"]
        for criterion in entry["criteria"]:
            assert set(criterion["controls"]) == {"positive", "negative"}
            assert isinstance(criterion["primary"], bool) and criterion["quote"]
            for reading in criterion["readings"]:  # one per data set, never pooled
                where = f"@{reading['data_set']}" if reading["data_set"] else ""
                assert reading["seeds"] == len(entry["samples"][criterion["number"] + where])
            assert criterion["status"] in ("met", "not met", "undecided", "degenerate")
            assert criterion["direction"] in ("supports", "refutes")
            for key in ("claim", "estimate", "low", "high", "method"):
                assert key in criterion
    html_before = report.html.read_text()
    (out / "index.html").unlink()
    rebuild(out)
    assert (out / "index.html").read_text() == html_before


def test_second_run_comes_from_the_cache(smoke_report):
    _, out = smoke_report
    again = run_report(["E1", "E4"], size="smoke", out=out, published=None, **QUIET)
    assert all(r.cached for r in again.results)
    assert [r.judgement for r in again.results] == [r.judgement for r in smoke_report[0].results]


def _experiment(id_: str, aggregate, plan=lambda config: []) -> Experiment:
    return Experiment(
        id=id_,
        title=f"test {id_}",
        claims=("C1",),
        hypothesis="h",
        setup="s",
        plan=plan,
        aggregate=aggregate,
        protocol=Protocol.from_data(
            {
                "id": id_,
                "criteria": [{**SMALL_X, "claim": "C1", "direction": "supports", "primary": True}],
                "sizes": {"smoke": {"a": 1}, "quick": {"a": 2}, "full": {"a": 3}, "control": {}},
            }
        ),
        headline=("x",),
        meaning={"holds": "a", "partly": "b", "fails": "c"},
        minutes={"smoke": 0, "quick": 0, "full": 0},
    )


def _draw(out: Path) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1])
    fig.savefig(out / "f.png")
    plt.close(fig)
    return Figure("f.png", "a line")


def test_a_crash_is_not_run_and_the_others_still_run(tmp_path):
    calls = []

    def fine(config, results, out):
        calls.append(config["a"])
        return Outcome({}, {"x": [0.5, 0.4, 0.6]}, figures=[_draw(out)])

    def broken(config, results, out):
        raise RuntimeError("boom")

    results = run_experiments(
        [_experiment("X1", broken), _experiment("X2", fine)], "smoke", tmp_path, **QUIET
    )
    assert results[0].judgement.verdict == "not run"
    assert "RuntimeError: boom" in results[0].judgement.reason
    assert "Traceback" in results[0].error
    assert results[1].judgement.verdict == "holds"
    assert not list((tmp_path / "cache").glob("X1-*"))  # a crash is not cached: it reruns
    again = run_experiments([_experiment("X2", fine)], "smoke", tmp_path, **QUIET)
    assert again[0].cached and calls == [1]
    changed = run_experiments([_experiment("X2", fine)], "quick", tmp_path, **QUIET)
    assert not changed[0].cached and calls == [1, 2]


def test_quick_verdicts_are_compared_with_the_published_full_run(smoke_report, tmp_path):
    report, _ = smoke_report
    document = json.loads(report.json.read_text())
    full = json.loads(json.dumps(document))
    full["meta"]["size"] = "full"
    full["experiments"][0]["verdict"] = (
        "holds" if document["experiments"][0]["verdict"] != "holds" else "fails"
    )
    path = tmp_path / "results.json"
    path.write_text(json.dumps(full))
    compared = report_document(document["experiments"], document["meta"], _published(path))
    assert compared["meta"]["compared_with"]["size"] == "full"
    first = compared["experiments"][0]
    assert first["full_verdict"] == full["experiments"][0]["verdict"] != first["verdict"]
    summary = render_markdown(compared)
    assert f"published full run of {full['meta']['date']} on {full['meta']['machine']}" in summary
    mark = " (exploratory)" if first["exploratory"] else ""
    full_mark = " (exploratory)" if first["full_exploratory"] else ""
    assert f"**{first['verdict']}**{mark} | **{first['full_verdict']}**{full_mark} |" in summary
    assert _published(tmp_path / "absent.json") is None


COMPUTED: list[int] = []
"""The seeds `_tenth` computed (in this process: the local executor)."""
CLOCK = [0.0]
"""The units' clock: each unit advances it by what it "takes"."""


def _tenth(seed: int) -> float:
    COMPUTED.append(seed)
    CLOCK[0] += 5.0 if seed == 1 else 1.0  # seed1 is the long unit
    return seed / 10


def _interrupting(seed: int) -> float:
    if seed == 1:
        raise KeyboardInterrupt
    return seed / 10


def _warning(seed: int) -> float:
    for _ in range(3):
        warnings.warn("divide by zero encountered in log", RuntimeWarning, stacklevel=1)
    return seed / 10


def _tenths(config) -> list[Unit]:
    return [Unit(f"seed{s}", _tenth, {"seed": s}) for s in range(3)]


def test_units_are_kept_while_an_experiment_runs_and_resume_after_a_crash(tmp_path, monkeypatch):
    COMPUTED.clear()
    crashed = []
    monkeypatch.setattr(plan_module, "perf_counter", lambda: CLOCK[0])

    def flaky(config, results, out):
        if not crashed:
            crashed.append(True)
            raise RuntimeError("killed after every unit")
        return Outcome({}, {"x": [results[f"seed{s}"] for s in range(3)]}, figures=[_draw(out)])

    first = run_experiments([_experiment("X3", flaky, _tenths)], "smoke", tmp_path, **QUIET)
    assert first[0].judgement.verdict == "not run" and COMPUTED == [0, 1, 2]
    second = run_experiments([_experiment("X3", flaky, _tenths)], "smoke", tmp_path, **QUIET)
    assert COMPUTED == [0, 1, 2]  # every unit read back, none recomputed
    assert second[0].judgement.verdict == "holds"
    assert second[0].outcome.samples["x"] == [0.0, 0.1, 0.2]
    assert not list((tmp_path / "units").iterdir())  # cleared once the result is cached
    # the units' times survive the crash: the result says what the first sitting's units took
    timed = second[0].units
    assert timed["count"] == 3 and timed["resumed"] == 3 and timed["longest"] == "seed1"
    assert timed["longest_seconds"] == 5.0 and timed["seconds"] == 7.0
    ((place, used),) = timed["where"].items()  # one host, the CPU: where the units ran
    assert place.endswith("(cpu)") and (used["units"], used["seconds"]) == (3, 7.0)
    assert timed["cpu_units"] == 3 and used["cpu_units"] == 3  # every unit's CPU time was read
    assert used["machines"] == timed["machines"] and len(timed["machines"]) == 1
    assert sorted(timed["each"]) == ["seed0", "seed1", "seed2"]
    assert timed["each"]["seed1"]["seconds"] == 5.0 and timed["each"]["seed1"]["machine"] == 0
    cached = run_experiments([_experiment("X3", flaky, _tenths)], "smoke", tmp_path, **QUIET)[0]
    assert cached.cached and cached.units == timed and cached.as_dict()["units"] == timed
    with pytest.raises(ValueError, match="not starting with _"):
        Unit("_times", _tenth)
    with pytest.raises(ValueError, match="module-level"):
        Unit("seed0", lambda: 0)


def test_a_failing_unit_says_why_on_its_own_line_and_the_others_still_run(tmp_path):
    def fine(config, results, out):
        return Outcome({}, {"x": [0.5, 0.4, 0.6]})

    def missing(config):
        return [Unit("seed0", _tenth, {"seed": 0}), Unit("seed1", _tenth, {"no_such": 1})]

    def warning(config):
        return [Unit("seed0", _warning, {"seed": 0})]

    lines: list[str] = []
    results = run_experiments(
        [_experiment("X1", fine, missing), _experiment("X2", fine, warning)],
        "smoke",
        tmp_path,
        log=lines.append,
    )
    assert [r.judgement.verdict for r in results] == ["not run", "holds"]
    assert not any("divide by zero" in line for line in lines)  # warnings go to the log file
    (logged,) = (tmp_path / "warnings.log").read_text().splitlines()  # once, not three times
    assert logged.startswith("X2 seed0: RuntimeWarning: divide by zero encountered in log")
    assert "unexpected keyword argument 'no_such'" in results[0].judgement.reason
    assert any(
        line.startswith("X1   unit seed1 failed: TypeError:") and "no_such" in line
        for line in lines
    )
    assert any(line.startswith("X1   why: crashed: ") for line in lines)


def test_a_second_report_on_the_same_folder_is_refused_and_a_stale_lock_is_taken(tmp_path):
    from implicit_em.report.running.lock import LOCK, Locked, hold

    def fine(config, results, out):
        return Outcome({}, {"x": [0.5, 0.4, 0.6]})

    with hold(tmp_path), pytest.raises(Locked, match=r"another report \(pid \d+ on "):
        run_experiments([_experiment("X1", fine)], "smoke", tmp_path, **QUIET)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (tmp_path / LOCK).write_text(f"{gone.stdout.strip()} {os.uname().nodename}")
    (result,) = run_experiments([_experiment("X1", fine)], "smoke", tmp_path, **QUIET)
    assert result.judgement.verdict == "holds" and not (tmp_path / LOCK).exists()


def test_a_missing_figure_or_wrong_return_is_a_crash(tmp_path):
    def no_file(config, results, out):
        return Outcome({"x": 0.5}, figures=[Figure("missing.png", "")])

    def wrong(config, results, out):
        return {"x": 0.5}

    results = run_experiments(
        [_experiment("X1", no_file), _experiment("X2", wrong)], "smoke", tmp_path, **QUIET
    )
    assert [r.judgement.verdict for r in results] == ["not run", "not run"]
    assert "missing.png" in results[0].judgement.reason
    assert "not an Outcome" in results[1].judgement.reason


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "implicit_em.cli", "report", *args]


def _start(out: Path, only: str, **popen: Any) -> subprocess.Popen:
    """`implicit-em report --smoke --only ONLY --out OUT` started, its output piped."""
    return subprocess.Popen(
        _cli("--smoke", "--only", only, "--out", str(out)), stdout=subprocess.PIPE, **popen
    )


@pytest.mark.slow
def test_a_killed_report_resumes_without_rerunning_what_finished(tmp_path):
    out = tmp_path / "rep"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = _start(out, "E1,E2,E3", stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while not list((out / "cache").glob("E1-*.json")) and time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read().decode()
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = {p.name for p in (out / "cache").glob("*.json")}
    assert any(name.startswith("E1-") for name in finished)
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cache").glob("*.json")}
    done = subprocess.run(
        _cli("--smoke", "--only", "E1,E2,E3", "--out", str(out)),
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "E1   " in done.stdout and "(cached)" in done.stdout
    for name, stamp in stamps.items():
        assert (out / "cache" / name).stat().st_mtime_ns == stamp  # nothing finished was rewritten
    assert not [
        p for p in (out / "cache").iterdir() if p.name.startswith(".")
    ]  # no half-written files
    assert (out / "index.html").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--only", "E1,E77"), "--only: unknown experiment id(s) E77"),
        (
            ("--out", "/proc/no-such-folder/report"),
            "--out /proc/no-such-folder/report: not a writable folder",
        ),
        (("--device", "tpu"), "--device tpu: expected cpu, cuda or cuda:N"),
        (("--quick", "--full"), "choose one of --quick, --full and --smoke"),
        (("--executor", "dask"), "--executor: expected one of local, ray, got 'dask'"),
        (("--address", "auto"), "--address: only the ray executor joins a cluster"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args, message, tmp_path):
    out = () if "--out" in args else ("--out", str(tmp_path))
    done = subprocess.run(_cli("--smoke", *out, *args), capture_output=True, text=True)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {message}")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("localhost", "--address: expected auto or HOST:PORT, got 'localhost'"),
        ("head:port", "--address: expected auto or HOST:PORT, got 'head:port'"),
        ("closed", "--address 127.0.0.1:{port}: nothing answers there (Connection refused)"),
    ],
)
def test_a_ray_address_that_cannot_be_joined_is_one_line_at_once(
    address, message, tmp_path, free_port
):
    pytest.importorskip("ray")
    port = free_port
    address = f"127.0.0.1:{port}" if address == "closed" else address
    args = ("--executor", "ray", "--address", address, "--out", str(tmp_path))
    done = subprocess.run(_cli("--smoke", *args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {message.format(port=port)}")
    assert not list(tmp_path.iterdir())  # nothing written


def test_cuda_without_a_device_is_refused(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    done = subprocess.run(
        _cli("--smoke", "--device", "cuda", "--out", str(tmp_path)), capture_output=True, text=True
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "error: --device cuda: no CUDA device is available on this machine"
    )
    assert not list(tmp_path.iterdir())  # nothing written


_ALARMING = '''
import json, sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import implicit_em as iem
from implicit_em.report import Experiment, Outcome, Unit
from implicit_em.report.running.progress import progress
from implicit_em.report.rules.protocol import Protocol
from implicit_em.report.running.runner import run_experiments


def collapsing(seed):
    """A real traced run whose head starts collapsed: the tracer raises its alarms."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    with torch.no_grad():
        model[0].bias.copy_(torch.tensor([20.0, 0.0, 0.0]))
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    with iem.trace.Tracer(model, sinks=["memory"]) as tracer:
        for _ in progress(range(3), desc="steps"):
            F.cross_entropy(model(x), y).backward()
            model.zero_grad()
            tracer.step()
    return len(tracer.alarms)


experiment = Experiment(
    id="X9", title="a collapsing head", claims=("C1",), hypothesis="h", setup="s",
    plan=lambda config: [Unit("seed0", collapsing, {"seed": 0})],
    aggregate=lambda config, results, out: Outcome(
        {"alarms": results["seed0"]}, {"x": [0.5, 0.4, 0.6]}
    ),
    headline=("x",),
    protocol=Protocol.from_data({
        "id": "X9",
        "criteria": [{"number": "x", "op": "<=", "threshold": 1.0, "means": "small",
                      "claim": "C1", "direction": "supports", "primary": True}],
        "sizes": {"smoke": {}, "quick": {}, "full": {}, "control": {}},
    }),
    meaning={"holds": "a", "partly": "b", "fails": "c"},
    minutes={"smoke": 0, "quick": 0, "full": 0},
)
(result,) = run_experiments([experiment], "smoke", Path(sys.argv[1]), log=print)
print("alarms recorded:", result.outcome.numbers["alarms"])
'''


def test_the_console_off_a_terminal_has_no_alarm_and_no_control_character(tmp_path):
    script = tmp_path / "alarming.py"
    script.write_text(_ALARMING)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert int(console.split("alarms recorded:")[1]) > 0  # the alarms were raised, as records
    assert "0.ce" not in console and "CollapseWarning" not in console
    assert not [c for c in console if c in "\r\x1b\x08"]
    lines = console.splitlines()
    assert "X9   running  a collapsing head" in lines
    assert any(
        line.startswith("X9   holds    (") and line.endswith(" s)  a collapsing head")
        for line in lines
    )


def test_ctrl_c_names_what_was_kept(tmp_path):
    def done_(config, results, out):
        return Outcome({}, {"x": [0.5, 0.4, 0.6]})

    def stopped(config):
        return [Unit(f"seed{s}", _interrupting, {"seed": s}) for s in range(2)]

    with pytest.raises(Interrupted) as stop:
        run_experiments(
            [_experiment("X1", done_), _experiment("X2", done_, stopped)],
            "smoke",
            tmp_path,
            **QUIET,
        )
    assert stop.value.kept == ["X1"] and stop.value.running == "X2"
    (units,) = (tmp_path / "units").iterdir()
    assert units.name.startswith("X2-") and (units / "seed0.json").is_file()
    lines: list[str] = []
    run_experiments(
        [_experiment("X1", done_), _experiment("X2", done_)], "smoke", tmp_path, log=lines.append
    )
    assert f"resuming: 1 finished experiment(s) read from {tmp_path / 'cache'}" in lines
    assert any(
        line.startswith("  X2") and "(resumes from 1 kept unit(s))" in line for line in lines
    )


@pytest.mark.slow
def test_ctrl_c_on_the_command_is_one_line_with_the_command_that_resumes(tmp_path):
    out = tmp_path / "rep"
    # SIGINT at its default, as from a terminal: a shell starts background commands with SIGINT
    # ignored, and a Python started so keeps ignoring it (a test suite run in the background).
    process = _start(
        out,
        "E1,E3",
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 600
    while not list(out.glob("units/E3-*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # E1 runs and is cached, then E3 keeps units
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130
    (line,) = stderr.strip().splitlines()
    assert line == (
        f"interrupted: 1 finished experiment(s) kept in {out / 'cache'}, and E3's finished "
        f"units in {out / 'units'}; resume with: implicit-em report --smoke --out {out} "
        "--only E1,E3"
    )


def test_the_announcement_reads_measured_times_and_marks_budgets(tmp_path):
    def fine(config, results, out):
        return Outcome({}, {"x": [0.5, 0.4, 0.6]})

    lines: list[str] = []
    experiments = [_experiment("X1", fine), _experiment("X2", fine)]
    run_experiments(experiments, "smoke", tmp_path, log=lines.append, measured={"X1": 30.0})
    assert lines[0] == "2 experiment(s) at size 'smoke', 2 to run (about 30 s: budgets for X2)"
    assert lines[1].startswith("  X1   about 30 s    test X1")
    assert "(budget)" in lines[2]
    lines.clear()
    run_experiments(
        experiments, "quick", tmp_path, log=lines.append, measured={"X1": 30.0, "X2": 90.0}
    )
    assert lines[0] == "2 experiment(s) at size 'quick', 2 to run (about 2 min: as measured)"


def test_times_json_holds_what_a_run_measured_and_is_read_back(smoke_report):
    report, out = smoke_report
    times = json.loads((out / "times.json").read_text())
    assert published_seconds(times, "smoke") == {r.experiment.id: r.seconds for r in report.results}


def test_the_files_are_readable_as_other_new_files_are(smoke_report, tmp_path):
    _, out = smoke_report
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    file, folder = (stat.S_IMODE((tmp_path / n).stat().st_mode) for n in ("file", "folder"))
    assert file & stat.S_IRGRP  # under the usual umask
    for name in ("index.html", "results.json", "summary.md", "times.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == file
    for figures in (out / "figures").iterdir():
        assert stat.S_IMODE(figures.stat().st_mode) == folder


def test_the_page_opens_with_contents_and_how_to_read_it_and_folds_configurations(smoke_report):
    report, _ = smoke_report
    html = report.html.read_text()
    # the answers table first, then the contents and how to read it, before the claims table
    assert html.index("<table class='answers'>") < html.index("<nav id='contents'>")
    assert html.index("<nav id='contents'>") < html.index('id="how-to-read"')
    assert html.index('id="how-to-read"') < html.index('id="claims"')
    for result in report.results:
        assert f"<li><a href='#{result.experiment.id}'>" in html
    sections = html.split("<section id=")[1:]
    assert len(sections) == len(report.results)
    for section in sections:
        assert "<details><summary>Configuration</summary>" in section
        assert "<td>device</td><td>cpu</td>" in section  # a setting per row, not a JSON blob
        assert '{"' not in section and "{&quot;" not in section


def test_sample_counts_say_what_they_count():
    assert sample_count(10, [0, 1, 2, 3, 4]) == "10 (5 seeds × 2 per seed)"
    assert sample_count(5, [0, 1, 2, 3, 4]) == "5 (one per seed)"
    assert sample_count(2, [0]) == "2 (1 seed × 2 per seed)"
    assert sample_count(7, [0, 1, 2]) == "7 (over 3 seeds)"

"""The report's files: the HTML page, results.json, summary.md, caching, resuming and crashes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from implicit_em.report import (
    VERDICTS,
    Experiment,
    Figure,
    Outcome,
    rebuild,
    run_report,
    unit,
)
from implicit_em.report.build import _published
from implicit_em.report.protocol import Protocol
from implicit_em.report.render import NO_FULL_RUN, render_markdown, report_document
from implicit_em.report.runner import duration, run_experiments

QUIET = {"log": lambda line: None}


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
        elif tag == "tr" and self._table == 2:
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
        assert item["primary"] is None or item["primary_experiment"] in item["experiments"]
    for entry in document["experiments"]:
        assert f"**{entry['verdict']}** | not published | {duration(entry['seconds'])} |" in summary
        assert entry["verdict"] in VERDICTS
        assert entry["rule"] and entry["hypothesis"] and (entry["criteria"] or entry["gates"])
        for gate in entry["gates"]:
            assert set(gate) == {"name", "passed", "detail", "verifies"}
        assert set(entry["protocol"]) == {"hash", "registered", "amendments"}
        assert isinstance(entry["exploratory"], bool) and entry["started"]
        for criterion in entry["criteria"]:
            assert set(criterion["controls"]) == {"positive", "negative"}
            assert isinstance(criterion["primary"], bool) and criterion["quote"]
            samples = entry["samples"][criterion["number"]]
            assert criterion["seeds"] == len(samples)
            assert criterion["status"] in ("met", "not met", "undecided")
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


def _experiment(id_: str, run) -> Experiment:
    return Experiment(
        id=id_,
        title=f"test {id_}",
        claims=("C1",),
        hypothesis="h",
        setup="s",
        run=run,
        protocol=Protocol.from_data(
            {
                "id": id_,
                "criteria": [
                    {
                        "number": "x",
                        "op": "<=",
                        "threshold": 1.0,
                        "means": "small",
                        "claim": "C1",
                        "direction": "supports",
                        "primary": True,
                    }
                ],
                "sizes": {
                    "smoke": {"a": 1},
                    "quick": {"a": 2},
                    "full": {"a": 3},
                    "control": {"a": 0},
                },
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

    def fine(config, out):
        calls.append(config["a"])
        return Outcome({}, {"x": [0.5, 0.4, 0.6]}, figures=[_draw(out)])

    def broken(config, out):
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
    assert f"**{first['verdict']}** | **{first['full_verdict']}** |" in summary
    assert _published(tmp_path / "absent.json") is None


def test_units_are_kept_while_an_experiment_runs_and_resume_after_a_crash(tmp_path):
    computed, crashed = [], []

    def flaky(config, out):
        values = [unit(f"seed{s}", lambda s=s: computed.append(s) or s / 10) for s in range(3)]
        if not crashed:
            crashed.append(True)
            raise RuntimeError("killed after every unit")
        return Outcome({}, {"x": values}, figures=[_draw(out)])

    assert unit("outside", lambda: {"a": 1}) == {"a": 1}  # no report run: just computed
    first = run_experiments([_experiment("X3", flaky)], "smoke", tmp_path, **QUIET)
    assert first[0].judgement.verdict == "not run" and computed == [0, 1, 2]
    second = run_experiments([_experiment("X3", flaky)], "smoke", tmp_path, **QUIET)
    assert computed == [0, 1, 2]  # every unit read back, none recomputed
    assert second[0].judgement.verdict == "holds"
    assert second[0].outcome.samples["x"] == [0.0, 0.1, 0.2]
    assert not list((tmp_path / "units").iterdir())  # cleared once the result is cached


def test_a_missing_figure_or_wrong_return_is_a_crash(tmp_path):
    def no_file(config, out):
        return Outcome({"x": 0.5}, figures=[Figure("missing.png", "")])

    def wrong(config, out):
        return {"x": 0.5}

    results = run_experiments(
        [_experiment("X1", no_file), _experiment("X2", wrong)], "smoke", tmp_path, **QUIET
    )
    assert [r.judgement.verdict for r in results] == ["not run", "not run"]
    assert "missing.png" in results[0].judgement.reason
    assert "not an Outcome" in results[1].judgement.reason


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "implicit_em.cli", "report", *args]


@pytest.mark.slow
def test_a_killed_report_resumes_without_rerunning_what_finished(tmp_path):
    out = tmp_path / "rep"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        _cli("--smoke", "--only", "E1,E2,E3", "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
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
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args, message, tmp_path):
    out = () if "--out" in args else ("--out", str(tmp_path))
    done = subprocess.run(_cli("--smoke", *out, *args), capture_output=True, text=True)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {message}")
    assert "Traceback" not in done.stderr


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

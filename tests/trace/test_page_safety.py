"""Pages never run a user's text: a module name, a run's file name, an experiment's title,
notes, tables, captions, configuration or error that holds markup is shown as text on the
tracer's health page and on the claims report page (both built with `implicit_em.pages`), in
a real headless Chromium, and none of its scripts runs."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.pages import escape
from implicit_em.report import Experiment, Figure, Outcome, Table
from implicit_em.report.rendering.page import render_html
from implicit_em.report.rules.protocol import Protocol
from implicit_em.report.running.build import write_report
from implicit_em.report.running.runner import run_experiments
from implicit_em.trace import Thresholds, Tracer
from implicit_em.trace.page import health_page, read_run

from .browser import chromium, needs_chromium

pytest.importorskip("matplotlib")

HIJACKED = "HIJACKED"
PAYLOAD = (
    f"\" onload=\"document['title']='{HIJACKED}'\" x=\""
    f"</script><script>document['title']='{HIJACKED}'</script>"
    f"<img src=x onerror=\"document['title']='{HIJACKED}'\">'"
)
"""Markup that, were it pasted into a page unescaped, would retitle the page: out of a
double-quoted attribute (an image's alternative text: its load runs the handler), out of a
script, as a script, and as an image whose failed load runs its handler. No dots: a module
name cannot hold one."""

_VOID = {"br", "hr", "img", "input", "link", "meta", "source", "wbr"}
"""Elements without an end tag."""


class _Dom(HTMLParser):
    """The document's title, the visible text, the scripts and the image sources of a page's DOM."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.title, self.text, self.scripts, self.images = "", [], 0, []
        self._in: list[str] = []
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _VOID:
            self._in.append(tag)
        self.scripts += tag == "script"
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._in:
            del self._in[len(self._in) - 1 - self._in[::-1].index(tag) :]

    def handle_data(self, data: str) -> None:
        if self._in[-2:] == ["head", "title"]:
            self.title += data
        elif not self._in or self._in[-1] not in ("script", "style"):
            self.text.append(data)


def _inert(page: Path, tmp_path: Path, title: str, texts: list[str]) -> None:
    """Load `page` in Chromium: its title is still `title`, it logs nothing, the DOM holds no
    element made from the payload (one script: the probe), and each of `texts` is in its text."""
    dom_html, console = chromium(page, tmp_path)
    dom = _Dom(dom_html)
    assert dom.title == title
    assert console == []
    assert dom.scripts == 1 and "x" not in dom.images
    shown = "".join(dom.text)
    for text in texts:
        assert text in shown


@needs_chromium
def test_the_payload_runs_when_pasted_unescaped(tmp_path: Path) -> None:
    # The control: the checks below see the payload when it does run.
    page = tmp_path / "unescaped.html"
    page.write_text(f"<!DOCTYPE html><html><head><title>t</title></head><body>{PAYLOAD}</body>")
    dom = _Dom(chromium(page, tmp_path)[0])
    assert dom.title == HIJACKED and dom.scripts == 2 and "x" in dom.images


def _traced(path: Path, head_name: str) -> None:
    """A classifier behind attention whose head is the module `head_name`, traced with a
    threshold that raises alarms (so the name is in the alarm and worst-site tables)."""
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    model = nn.ModuleDict({"attn": attn})
    model.add_module(head_name, nn.Linear(8, 4))
    head = model[head_name]
    x, y = torch.randn(16, 5, 8), torch.randint(0, 4, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model, sinks=[f"jsonl:{path}"], thresholds=Thresholds(dominance=0.27)) as t:
        for _ in range(4):
            F.cross_entropy(head(attn(x, x, x)[0].mean(1)), y).backward()
            opt.step()
            opt.zero_grad()
            t.step()


@needs_chromium
def test_a_module_and_run_named_with_markup_are_text_on_the_health_page(tmp_path: Path) -> None:
    name = PAYLOAD.replace("/", "")  # a file name cannot hold a slash
    run = tmp_path / f"{name}.jsonl"
    _traced(run, PAYLOAD)
    result = CliRunner().invoke(app, ["trace", "report", str(run), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    page = tmp_path / "o" / "index.html"
    assert "<td>" + f"{PAYLOAD}.ce" not in page.read_text()
    _inert(page, tmp_path, f"Tracer health: {run.name}", [f"{PAYLOAD}.ce", run.name])


def test_fields_of_a_crafted_run_file_are_text_on_the_health_page(tmp_path: Path) -> None:
    record = {"kind": "site", "step": PAYLOAD, "site": f"{PAYLOAD}.ce", "type": "classification"}
    run = tmp_path / "crafted.jsonl"
    run.write_text(json.dumps({**record, "entropy": 0.5, PAYLOAD: 1.0}) + "\n")
    html = health_page(read_run(run))
    assert "<script>" not in html and 'onload="' not in html and escape(PAYLOAD) in html


def _experiment(id_: str, run) -> Experiment:
    size = {PAYLOAD: 1}
    return Experiment(
        id=id_,
        title=f"title {PAYLOAD}",
        claims=("C1",),
        hypothesis=f"hypothesis {PAYLOAD}",
        setup=f"setup {PAYLOAD}",
        plan=lambda config: [],
        aggregate=lambda config, results, out: run(config, out),
        protocol=Protocol.from_data(
            {
                "id": id_,
                "criteria": [
                    {
                        "number": "x",
                        "op": "<=",
                        "threshold": 1.0,
                        "means": f"means {PAYLOAD}",
                        "claim": "C1",
                        "direction": "supports",
                        "primary": True,
                    }
                ],
                "sizes": {"smoke": size, "quick": size, "full": size, "control": {}},
            }
        ),
        headline=("x",),
        meaning={"holds": f"holds {PAYLOAD}", "partly": "b", "fails": "c"},
        minutes={"smoke": 0, "quick": 0, "full": 0},
    )


def _measured(config: dict, out: Path) -> Outcome:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1])
    fig.savefig(out / "f.png")
    plt.close(fig)
    return Outcome(
        {f"number {PAYLOAD}": f"value {PAYLOAD}"},
        {"x": [0.5, 0.4, 0.6]},
        tables=[Table(f"table {PAYLOAD}", (f"column {PAYLOAD}",), ((f"cell {PAYLOAD}",),))],
        figures=[Figure("f.png", f"caption {PAYLOAD}")],
        notes=[f"note {PAYLOAD}"],
    )


def _crashed(config: dict, out: Path) -> Outcome:
    raise RuntimeError(f"error {PAYLOAD}")


@needs_chromium
def test_an_experiments_text_is_text_on_the_report_page(tmp_path: Path) -> None:
    experiments = [_experiment("X1", _measured), _experiment("X2", _crashed)]
    results = run_experiments(experiments, "smoke", tmp_path, log=lambda line: None)
    assert [r.judgement.verdict for r in results] == ["holds", "not run"]
    report = write_report(results, "smoke", tmp_path, published=None)
    texts = ["title", "hypothesis", "setup", "means", "holds", "number", "value", "table"]
    texts += ["column", "cell", "caption", "note", "error"]
    _inert(
        report.html,
        tmp_path,
        "implicit-em claims report",
        [f"{t} {PAYLOAD}" for t in texts] + [PAYLOAD],
    )


def test_a_figure_path_out_of_the_report_folder_is_refused(tmp_path: Path) -> None:
    (secret := tmp_path / "secret.txt").write_text("not for the page")
    out = tmp_path / "report"
    out.mkdir()
    results = run_experiments([_experiment("X1", _measured)], "smoke", out, log=lambda _: None)
    document = json.loads(write_report(results, "smoke", out, published=None).json.read_text())
    assert render_html(document, out).count("data:image/png;base64,") == 1
    for path in ("../secret.txt", str(secret)):
        document["experiments"][0]["figures"][0]["path"] = path
        with pytest.raises(ValueError, match=f"figure '{re.escape(path)}' lies outside"):
            render_html(document, out)

"""The health page (`implicit-em trace report`): strict reading of a run's file, the page's
sections, the command's errors, and the page in a real headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.trace import Thresholds, Tracer
from implicit_em.trace.page import RunFileError, health_page, read_run, site_label

from .browser import check_in_browser, chromium, needs_chromium

pytest.importorskip("matplotlib")


def _traced_run(path: Path, steps: int = 6) -> None:
    """A classifier behind an attention layer, traced with a threshold that raises alarms."""
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    head = nn.Linear(8, 4)
    model = nn.ModuleDict({"attn": attn, "head": head})
    x, y = torch.randn(16, 5, 8), torch.randint(0, 4, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model, sinks=[f"jsonl:{path}"], thresholds=Thresholds(dominance=0.27)) as t:
        for _ in range(steps):
            F.cross_entropy(head(attn(x, x, x)[0].mean(1)), y).backward()
            opt.step()
            opt.zero_grad()
            t.step()


def test_page_has_every_section_and_the_alarm_messages(tmp_path):
    _traced_run(tmp_path / "run.jsonl")
    run = read_run(tmp_path / "run.jsonl")
    html = health_page(run)
    for section in ("summary", "type-attention", "type-classification", "alarms", "worst"):
        assert f"id='{section}'" in html
    drawn = html.count("<div class='metric'")
    assert drawn > 2 and html.count("data:image/png;base64,") == drawn
    assert html.count("<b>Healthy:</b>") == drawn  # each plot has its definition and range
    assert "one component holds most of the mass" in html
    dominance = [a for a in run.history.alarms() if a["alarm"] == "dominance"]
    first, last = dominance[0]["step"], dominance[-1]["step"]
    site = "head.ce (module head, cross-entropy)"
    row = (
        f"<td>{site}</td><td>dominance</td><td>{len(dominance)}</td><td>{first}</td><td>{last}</td>"
    )
    assert len(dominance) > 1 and row in html
    assert "http://" not in html and "https://" not in html


def test_a_corrupt_line_names_file_and_line(tmp_path):
    _traced_run(tmp_path / "run.jsonl", steps=2)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20] + "\n" + "\n".join(lines[4:]) + "\n")
    with pytest.raises(RunFileError, match=rf"{re.escape(str(bad))}:4: not a JSON record"):
        read_run(bad)
    partial = read_run(bad, partial=True)
    assert len(partial.history) == 3 and partial.error.startswith(f"{bad}:4:")
    assert "id='partial'" in health_page(partial)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"kind": "site", "step": 0, "site": "ce", "type": "classification"}\n{"kin',
            ":2: not a JSON",
        ),
        ("[1, 2]\n", ":1: not a tracer record"),
        ("", "no tracer record"),
    ],
)
def test_command_errors_are_one_line_and_exit_2(tmp_path, content, message):
    run = tmp_path / "run.jsonl"
    run.write_text(content)
    result = CliRunner().invoke(app, ["trace", "report", str(run), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and message in result.output, result.output
    assert not (tmp_path / "o" / "index.html").exists()


def test_command_partial_writes_the_records_read(tmp_path):
    _traced_run(tmp_path / "run.jsonl", steps=2)
    with (tmp_path / "run.jsonl").open("a") as f:
        f.write('{"kind": "site", "trunc')
    args = ["trace", "report", str(tmp_path / "run.jsonl"), "--out", str(tmp_path / "o")]
    assert CliRunner().invoke(app, args).exit_code == 2
    result = CliRunner().invoke(app, [*args, "--partial"])
    assert result.exit_code == 0, result.output
    assert "Partial: reading stopped" in (tmp_path / "o" / "index.html").read_text()


def test_missing_file_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["trace", "report", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2 and "cannot be read" in result.output


@needs_chromium
def test_console_errors_are_caught(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<html><body><script>console.error("boom")</script></body></html>')
    _, console = chromium(page, tmp_path)
    assert any('"boom"' in line for line in console)


@needs_chromium
def test_page_in_chromium(tmp_path):
    _traced_run(tmp_path / "run.jsonl")
    result = CliRunner().invoke(
        app, ["trace", "report", str(tmp_path / "run.jsonl"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    sections = {"summary", "type-attention", "type-classification", "alarms", "worst"}
    check_in_browser(tmp_path / "o" / "index.html", tmp_path, sections)


@needs_chromium
@pytest.mark.slow
def test_page_of_the_trace_demo_in_chromium(tmp_path):
    from implicit_em.trace.demo import run_demo

    run_demo(tmp_path / "demo", epochs=1)
    result = CliRunner().invoke(
        app,
        ["trace", "report", str(tmp_path / "demo" / "trace.jsonl"), "--out", str(tmp_path / "o")],
    )
    assert result.exit_code == 0, result.output
    check_in_browser(
        tmp_path / "o" / "index.html",
        tmp_path,
        {"summary", "type-classification", "alarms", "worst"},
    )


def test_many_sites_are_drawn_as_median_and_band():
    from implicit_em.trace import History
    from implicit_em.trace.figures import health_timeline

    records = [
        {
            "kind": "site",
            "step": step,
            "site": f"h.{i}.attn",
            "type": "attention",
            "entropy": i + step,
        }
        for step in range(3)
        for i in range(12)
    ]
    records.append({"kind": "alarm", "step": 1, "site": "h.0.attn", "alarm": "nonfinite_gradient"})
    fig = health_timeline(History(records), "attention", ["entropy"])
    (ax,) = [a for a in fig.axes if a.get_visible()]
    (median,) = [line for line in ax.get_lines() if line.get_label() == "median"]
    assert list(median.get_ydata()) == [5.5, 6.5, 7.5]
    assert len(ax.collections) == 1  # the min-max band
    assert [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"] == [1]


def test_a_metric_flat_at_its_healthy_value_is_one_line_and_the_others_are_drawn(tmp_path):
    records = [
        {
            "kind": "site",
            "step": step,
            "site": "2.ce",
            "type": "classification",
            "effective_k": 3.0 - step / 10,
            "dead": 0,
            "residual": 1e-7,
        }
        for step in range(4)
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    html = health_page(read_run(path))
    assert html.count("<div class='metric'") == 1 and "id='classification-effective_k'" in html
    (folded,) = re.findall(r"<p class='healthy'>.*?</p>", html)
    assert "<code>dead</code>" in folded and "<code>residual</code>" in folded
    assert "2.ce (module 2, cross-entropy)" in html
    records[2]["dead"] = 1  # no longer flat: drawn, with its guide
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    html = health_page(read_run(path))
    assert "id='classification-dead'" in html and html.count("<b>Healthy:</b>") == 2


def test_site_labels_say_what_the_site_is():
    assert (
        site_label("transformer.h.3.attn")
        == "transformer.h.3.attn (module transformer.h.3, attention)"
    )
    assert site_label("ce") == "ce (cross-entropy)"
    assert site_label("custom") == "custom"

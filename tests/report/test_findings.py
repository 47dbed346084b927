"""The findings page: the answers table, the legend and one block per item, written from the
published run and kept in step; the README and the report page open with the same table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from implicit_em.report.rendering.answers import COLUMNS, answer_rows, markdown_table
from implicit_em.report.rendering.changes import changed_by, changes_table, configuration_changes
from implicit_em.report.rendering.findings import findings_page, page_from, recorded_arguments
from implicit_em.report.rendering.readme import BEGIN, END
from implicit_em.report.rules.claims import CLAIMS

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "results" / "full" / "results.json"
PAGE = ROOT / "docs" / "findings.md"
QUICK = ROOT / "results" / "quick" / "results.json"
REPLICATION = ROOT / "results" / "quick-replication" / "results.json"
PAGE_MODULE = "implicit_em.report.rendering.findings"
README = ROOT / "README.md"
ROW_WIDTH = 220
"""The most characters a row of the answers table may take, as Markdown."""


@pytest.fixture(scope="module")
def page() -> str:
    replicated = (json.loads(QUICK.read_text()), json.loads(REPLICATION.read_text()))
    published = json.loads(PUBLISHED.read_text())
    return findings_page(published, replicated=replicated)


def test_the_committed_page_says_what_its_recorded_command_writes(monkeypatch):
    """The page is rewritten by the command its header records (the published run, the run
    before it when given, the replication) and must read the same."""
    committed = PAGE.read_text()
    argv = recorded_arguments(committed)
    assert argv[:2] == ["docs/findings.md", "results/full/results.json"]
    monkeypatch.chdir(ROOT)
    path, expected = page_from(argv)
    assert path == Path("docs/findings.md")
    assert committed == expected, (
        f"docs/findings.md is out of date: python -m {PAGE_MODULE} {' '.join(argv)}"
    )


def test_the_recorded_command_reads_back_and_a_page_without_one_is_refused():
    argv = ["p.md", "r.json", "--earlier", "e.json", "--replication", "q.json", "s.json"]
    header = f"# Findings\n\n<!-- written by `python -m {PAGE_MODULE} {' '.join(argv)}`; do not edit -->\n"
    assert recorded_arguments(header) == argv
    with pytest.raises(ValueError, match="records no command"):
        recorded_arguments("# Findings\n")


def test_every_item_has_its_block_with_the_five_answers(page):
    sections = page.split("\n## Replication on fresh seeds")[0].split("\n## ")[1:]
    assert sections[0].startswith("How to read\n")  # the legend, then the blocks
    blocks = sections[1:]
    assert [b.split(":", 1)[0] for b in blocks] == list(CLAIMS)
    for block in blocks:
        for heading in (
            "**Tested.**",
            "**Measured.**",
            "**Verdict.**",
            "**Strongest rival.**",
            "**What would change it.**",
        ):
            assert heading in block, (block.split("\n", 1)[0], heading)


def test_the_verdict_shown_is_the_items_verdict_under_the_current_rules(page):
    from implicit_em.report.judging.item_verdicts import verdict_label
    from implicit_em.report.judging.rejudge import rejudge_document

    doc = rejudge_document(json.loads(PUBLISHED.read_text()))
    for item in doc["claim_verdicts"]:
        block = page.split(f"\n## {item['id']}: ", 1)[1]
        assert f"**{verdict_label(item)}**" in block.split("\n\n", 2)[1]


def _entry(estimate: float, criteria: tuple[str, ...] = ("a",)) -> dict:
    return {
        "rule": "every part is needed",
        "parts": [
            {
                "id": "p",
                "criteria": [
                    {"experiment": "E1", "number": n, "estimate": estimate} for n in criteria
                ],
                "gates": [],
            }
        ],
    }


@pytest.mark.parametrize(
    ("now", "then", "sizes", "why"),
    [
        (_entry(1.0), _entry(1.0), ("full", "full"), []),
        (_entry(1.0), _entry(2.0), ("full", "full"), ["measurement"]),
        (_entry(1.0), _entry(1.0, ("a", "b")), ("full", "full"), ["rule"]),
        (_entry(1.0), _entry(2.0), ("full", "quick"), ["measurement", "scale"]),
    ],
)
def test_what_changed_a_verdict_is_named(now, then, sizes, why):
    assert changed_by(now, then, *sizes) == why


_SMALL = {"tasks": {"bijection": {"n_symbols": 4}}, "train": {"n_layer": 1}, "seeds": [1000]}
_REFERENCE = {"tasks": {"bijection": {"n_symbols": 20}}, "train": {"n_layer": 1}, "seeds": [9100]}


@pytest.mark.parametrize(
    ("now", "then", "keys"),
    [
        (_REFERENCE, _SMALL, ["tasks"]),
        ({**_SMALL, "seeds": [9100], "workers": 2}, _SMALL, []),  # seeds and execution only
        ({**_SMALL, "arm": {"steps": 10, "arm_seeds": [1]}}, {**_SMALL, "arm": {"steps": 10}}, []),
        ({**_SMALL, "arm": {"steps": 20}}, {**_SMALL, "arm": {"steps": 10}}, ["arm"]),
        ({**_REFERENCE, "arm": {"steps": 20}}, _SMALL, ["arm", "tasks"]),
    ],
)
def test_a_changed_configuration_is_named_with_its_keys(now, then, keys):
    """Two runs of the same size: a change of task sizes, models or budgets is named, with the
    experiment and its keys; new seeds or another machine are not a change of configuration."""
    same = _entry(1.0)
    why = [f"configuration (E1: {', '.join(keys)})"] if keys else []
    assert changed_by(same, same, "full", "full", {"E1": now}, {"E1": then}) == why
    assert configuration_changes(now, then) == keys


def test_a_file_that_is_no_report_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text("not json")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "implicit_em.report.rendering.findings",
            str(tmp_path / "f.md"),
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: RESULTS: expected a report's results.json")
    assert not (tmp_path / "f.md").exists()


def test_the_replication_section_counts_the_verdicts_both_runs_share(page):
    from implicit_em.report.judging.rejudge import rejudge_document

    quick, again = (rejudge_document(json.loads(p.read_text())) for p in (QUICK, REPLICATION))
    ours = {e["id"]: e["verdict"] for e in quick["claim_verdicts"]}
    theirs = {e["id"]: e["verdict"] for e in again["claim_verdicts"]}
    same = [i for i in ours if ours[i] == theirs[i]]
    section = page.split("## Replication on fresh seeds", 1)[1]
    assert f"reproduced {len(same)} of {len(ours)} item verdicts" in section
    for item in set(ours) - set(same):
        assert f"- {item}: **" in section


def test_the_page_says_once_at_which_task_sizes_the_wind_tunnel_was_measured():
    """C11 reads E10 and E11: the page says once, ahead of the legend, which task sizes and
    which transformer ran, as the run's configuration records them (the quick report, which
    runs every experiment); no block repeats it."""
    quick = json.loads(QUICK.read_text())
    page = findings_page(quick)
    e10 = next(e for e in quick["experiments"] if e["id"] == "E10")
    head = page.split("\n## How to read", 1)[0]
    sizes = next(line for line in head.splitlines() if "Task sizes" in line)
    bijection = ", ".join(f"{k} = {v}" for k, v in e10["config"]["tasks"]["bijection"].items())
    assert re.search(rf"on E10, E11[^:]*: bijection {re.escape(bijection)};", sizes)
    train = e10["config"]["train"]
    assert f"transformer {train['n_layer']} × {train['n_embd']}" in sizes
    assert "Task sizes" not in page.split("\n## How to read", 1)[1]


def test_again_rewrites_a_page_by_the_command_it_records(tmp_path, monkeypatch):
    from implicit_em.report.rendering.findings import main

    monkeypatch.chdir(ROOT)
    copy = tmp_path / "findings.md"
    committed = PAGE.read_text()
    copy.write_text(committed.replace("**Tested.**", "**Stale.**"))
    assert main(["--again", str(copy)]) == 0
    assert copy.read_text() == committed  # the page its recorded command writes
    assert main(["--again"]) == 2
    copy.write_text("# no command here\n")
    assert main(["--again", str(copy)]) == 2


def test_beside_an_earlier_run_every_item_is_a_row_naming_what_changed():
    """The published full run beside the quick report, read as its earlier run: one row per item
    of the page, each with the verdicts its own block gives, and a changed verdict names the
    scale (the two runs differ in size)."""
    published, quick = json.loads(PUBLISHED.read_text()), json.loads(QUICK.read_text())
    text = findings_page(published, earlier=quick)
    section = text.split("\n## Beside the earlier run (", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    idents = [i for i in CLAIMS if f"\n## {i}: " in text]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows[1:]] == idents
    changed = 0
    for row in rows[1:]:
        ident, was, now, why = row.strip("| ").split(" | ")
        block = text.split(f"\n## {ident}: ", 1)[1].split("\n## ", 1)[0]
        assert f"**{now}**" in block.split("\n\n", 2)[1]
        earlier_line = next(x for x in block.splitlines() if x.startswith("**Earlier run:**"))
        assert f"**{was}**" in earlier_line
        if why.startswith("unchanged"):
            assert earlier_line.endswith(". Unchanged.")
            assert (was == now) == (why == "unchanged")
        else:
            changed += 1
            assert "scale" in why and earlier_line.endswith(f". Changed by: {why}.")
    assert f"{changed} of {len(idents)} verdicts changed." in section


def test_an_item_the_earlier_run_lacks_is_a_new_row():
    item = {"id": "C1", "verdict": "supported", "parts": []}
    lines = changes_table(
        {"C1": item, "C2": {**item, "id": "C2"}},
        {"C2": {**item, "id": "C2"}},
        {"size": "full", "date": "now"},
        {"size": "full", "date": "then"},
    )
    assert lines[0] == "## Beside the earlier run (then)"
    assert lines[6].startswith("| C1 | not in that run | ") and lines[6].endswith(" | a new item |")
    assert lines[7].endswith(" | unchanged |")
    assert lines[-1] == "1 of 2 verdicts changed."


def _table(text: str) -> list[str]:
    """The answers table of a Markdown page: its header line and every line after it."""
    lines = text.splitlines()
    start = lines.index("| " + " | ".join(COLUMNS) + " |")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def _blocks(page: str) -> dict[str, str]:
    body = page.split("\n## Replication on fresh seeds", 1)[0]
    return {b.split(":", 1)[0]: b for b in body.split("\n## ")[1:] if b.split(":", 1)[0] in CLAIMS}


def test_the_page_opens_with_one_row_per_item_each_fitting_the_screen(page):
    """The answers table comes first (after the title and one line naming the run): 27 rows,
    each within `ROW_WIDTH` characters, the rows `answer_rows` gives."""
    from implicit_em.report.judging.rejudge import rejudge_document

    table = _table(page)
    assert page.index(table[0]) < page.index("\n## ")
    assert len(table) == 2 + len(CLAIMS) == 29
    assert [line.split(" | ")[0].removeprefix("| ") for line in table[2:]] == list(CLAIMS)
    too_wide = [line for line in table if len(line) > ROW_WIDTH]
    assert not too_wide, too_wide
    judged = rejudge_document(json.loads(PUBLISHED.read_text()))
    assert table == markdown_table(answer_rows(judged["claim_verdicts"]))


def _sentences(block: str) -> set[str]:
    """The block's sentences (split at '. ' and at line ends) of at least eight words, without
    the Markdown list marks around them."""
    pieces = (s.strip().strip("-*").strip() for s in re.split(r"\. |\n", block))
    return {s for s in pieces if len(s.split()) >= 8}


@pytest.mark.parametrize("source", ["generated", "committed"])
def test_no_sentence_is_repeated_from_block_to_block(page, source):
    """Each rule's text is the legend's; what several items share is written out in one block:
    no sentence of eight words or more appears in two item blocks."""
    text = page if source == "generated" else PAGE.read_text()
    blocks = _blocks(text)
    assert list(blocks) == list(CLAIMS)
    seen: dict[str, str] = {}
    repeated = []
    for ident, block in blocks.items():
        for sentence in _sentences(block):
            if sentence in seen:
                repeated.append(f"{seen[sentence]} and {ident}: {sentence}")
            seen.setdefault(sentence, ident)
    assert not repeated, "\n".join(repeated)


def test_the_legend_holds_each_rule_once_and_no_block_holds_one(page):
    from implicit_em.report.items.forms import FORMS
    from implicit_em.report.items.registry import RULES

    legend = page.split("\n## How to read", 1)[1].split("\n## ", 1)[0]
    for rule in [*FORMS.values(), RULES["all"]]:
        assert legend.count(rule) == 1
        assert not any(rule in block for block in _blocks(page).values())


def test_the_readme_opens_its_report_section_with_the_findings_table():
    """The README's answers table is the findings page's, row for row (both written from
    results/full: `implicit-em publish` writes the README's, `make pages` the page)."""
    readme = README.read_text(encoding="utf-8")
    section = readme.split("## What the claims report finds\n", 1)[1]
    assert section.lstrip().startswith(BEGIN)
    block = section.split(BEGIN, 1)[1].split(END, 1)[0]
    assert _table(block) == _table(PAGE.read_text())
    after = section.split(END, 1)[1].strip().split("\n\n", 1)[0]
    assert after.startswith("How a verdict is reached.") and len(after.splitlines()) <= 8


class _AnswersTable(HTMLParser):
    """The rows (cells as text) of a page's answers table."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._inside = self._cell = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("class", "answers") in attrs:
            self._inside = True
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag in ("td", "th"):
            self._cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._inside = False
        elif tag in ("td", "th"):
            self._cell = False

    def handle_data(self, data: str) -> None:
        if self._inside and self._cell:
            self.rows[-1][-1] += data


def test_the_report_page_opens_with_the_same_table_and_a_short_guide(tmp_path, page):
    """The report page of the published run carries the findings table's rows, ahead of its
    "how to read", a list of at most five points that links to the legend."""
    from implicit_em.report.judging.rejudge import rejudge_document
    from implicit_em.report.rendering.page import render_html

    judged = rejudge_document(json.loads(PUBLISHED.read_text()))
    for e in judged["experiments"]:
        e["figures"] = []
    html = render_html(judged, tmp_path)
    rows = _AnswersTable(html).rows
    cells = [[c.strip().replace("\\|", "|") for c in line.split(" | ")] for line in _table(page)]
    cells = [[c.removeprefix("| ").removesuffix(" |") for c in row] for row in cells]
    assert rows == [cells[0], *cells[2:]]
    assert (
        html.index("class='answers'") < html.index('id="how-to-read"') < html.index('id="claims"')
    )
    guide = html.split('id="how-to-read"', 1)[1].split("<h2", 1)[0]
    assert guide.count("<li>") <= 5 and "<a href='#legend'>" in guide
    assert "<details id='legend'>" in guide

"""`implicit_em.pages`: the HTML pieces the claims report and the tracer's page share."""

from __future__ import annotations

import base64

from implicit_em import pages


def test_escape_covers_markup_and_quotes():
    assert pages.escape('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"


def test_format_number():
    assert pages.format_number(0.000012345) == "1.234e-05"
    assert pages.format_number(3.14159) == "3.142"
    assert pages.format_number(float("nan")) == "nan"
    assert pages.format_number(list(range(10))).endswith("… (10 values)]")


def test_table_escapes_cells_and_caption():
    html = pages.table(("a", "b"), [("<x>", 0.5)], title="t&t")
    assert "<caption>t&amp;t</caption>" in html
    assert "<td>&lt;x&gt;</td><td>0.5</td>" in html


def test_embedded_figure_round_trips_the_bytes():
    png = b"\x89PNG\r\n\x1a\nrest"
    html = pages.embedded_figure(png, 'say "hi"')
    data = html.split("base64,")[1].split('"')[0]
    assert base64.b64decode(data) == png
    assert 'alt="say &quot;hi&quot;"' in html


def test_page_is_one_document_with_the_shared_style():
    html = pages.page("a <title>", "<p>body</p>")
    assert html.startswith("<!DOCTYPE html>")
    assert "<title>a &lt;title&gt;</title>" in html and pages.CSS in html
    assert "<p>body</p>" in html

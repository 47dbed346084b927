"""Self-contained HTML pages: the shell, escaping, numbers, tables and embedded figures.

The claims report (`implicit_em.report`) and the tracer's health page
(`implicit_em.trace.page`) are both built from these pieces; this module sits below both and
imports neither. A page is one file: its style is inline and its figures are PNG images
embedded as base64 `data:` URLs, so it opens anywhere without a server or a network.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from typing import Any

__all__ = ["CSS", "embedded_figure", "escape", "format_number", "page", "table"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;line-height:1.5;color:#1f2328}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.3em;margin-top:2em}
table{border-collapse:collapse;margin:1em 0;font-size:.92em;display:block;max-width:100%;overflow-x:auto}th,td{border:1px solid #d0d7de;
padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f6f8fa}caption{text-align:left;
font-weight:600;padding:.3em 0}.verdict{color:#fff;border-radius:1em;padding:.1em .7em;font-size:.8em;
font-weight:600;white-space:nowrap}figure{margin:1em 0}img{max-width:100%;border:1px solid #d0d7de}
figcaption{font-size:.9em;color:#57606a}.meta{font-size:.85em;color:#57606a}.note{background:#f6f8fa;
padding:.5em .8em;border-left:3px solid #d0d7de}pre.error{background:#fff1f0;padding:.8em;overflow:auto}
code{font-size:.85em}nav ul,nav ol{margin:.3em 0}details{margin:.6em 0}summary{cursor:pointer}
.metric{display:grid;grid-template-columns:minmax(0,3fr) minmax(12em,1fr);gap:1em;align-items:center}
.metric figure{margin:.5em 0}.guide{font-size:.9em}.healthy{color:#1a7f37}
@media (max-width:900px){.metric{grid-template-columns:1fr}.guide{order:-1}}
"""
"""The style every page shares."""


def escape(value: Any) -> str:
    """`str(value)` escaped for HTML text and attribute values (quotes included)."""
    return html.escape(str(value), quote=True)


def format_number(value: Any) -> str:
    """A number as the pages print it (4 significant digits, scientific when tiny or huge;
    lists of more than 8 values shortened)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4g}"
        return f"{value:.3e}"
    if isinstance(value, list):
        if len(value) > 8:
            return (
                "[" + ", ".join(format_number(v) for v in value[:8]) + f", … ({len(value)} values)]"
            )
        return "[" + ", ".join(format_number(v) for v in value) + "]"
    return str(value)


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    """An HTML table: a header of `columns`, one row per entry of `rows` (cells formatted
    with `format_number`, then escaped), and `title` as its caption."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(format_number(v))}</td>" for v in row) + "</tr>"
        for row in rows
    )
    caption = f"<caption>{escape(title)}</caption>" if title else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def embedded_figure(png: bytes, caption: str) -> str:
    """A `<figure>` showing the PNG image `png` from a base64 `data:` URL, with `caption`
    as its caption and alternative text."""
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def page(title: str, body: str) -> str:
    """A whole HTML document: `title` (escaped) in its head, the shared style, and `body`
    (HTML) as its body."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{escape(title)}</title><style>{CSS}</style></head><body>
{body}
</body></html>
"""

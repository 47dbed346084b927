r"""A small forest plot of one theory item's criteria, as inline SVG.

One row per criterion, part by part: its 95% interval as a bar, its estimate as a dot and its
threshold as a vertical tick. Criteria read numbers in different units, so each row has its own
scale: the span of its interval and threshold, padded by a tenth on each side. A row is coloured
by what its criterion says of the item (`for`, `against`, `undecided`); one that casts no vote
(by construction, degenerate, no realistic negative control, controls not as planted) is drawn
hollow grey.
Hovering a row shows its number, interval, threshold and standing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.pages import escape, format_number

__all__ = ["VOTE_COLOURS", "forest_svg"]

VOTE_COLOURS = {
    "for": "#1a7f37",
    "against": "#cf222e",
    "undecided": "#8250df",
    "no vote": "#8c959f",
}

_WIDTH, _ROW = 300, 16


def _span(row: Mapping[str, Any]) -> tuple[float, float] | None:
    values = [row.get(k) for k in ("low", "high", "estimate", "threshold")]
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    pad = 0.1 * (high - low) or 0.1 * max(abs(high), 1e-12)
    return low - pad, high + pad


def _x(value: float, span: tuple[float, float]) -> float:
    low, high = span
    return 4 + (_WIDTH - 8) * (value - low) / (high - low)


def _row(row: Mapping[str, Any], y: float) -> str:
    span = _span(row)
    label = (
        f"{row['experiment']} {row['number']}"
        + f": {format_number(row.get('estimate'))} [{format_number(row.get('low'))}, "
        f"{format_number(row.get('high'))}], needs {row['op']} {format_number(row['threshold'])}; "
        f"{row['status']}, vote {row['vote']}"
        + (f" ({row['standing']})" if row.get("standing", "counted") != "counted" else "")
    )
    parts = [f"<g><title>{escape(label)}</title>"]
    parts.append(
        f'<rect x="0" y="{y:.1f}" width="{_WIDTH}" height="{_ROW}" fill="transparent"></rect>'
    )
    if span is None:
        parts.append(
            f'<text x="4" y="{y + 12:.1f}" font-size="10" fill="#57606a">not measured</text></g>'
        )
        return "".join(parts)
    colour = VOTE_COLOURS.get(row["vote"], VOTE_COLOURS["no vote"])
    mid = y + _ROW / 2
    thick = 2
    threshold = _x(float(row["threshold"]), span)
    parts.append(
        f'<line x1="{threshold:.1f}" x2="{threshold:.1f}" y1="{y + 1:.1f}" y2="{y + _ROW - 1:.1f}" '
        'stroke="#1f2328" stroke-width="1.5"></line>'
    )
    low, high, estimate = (row.get(k) for k in ("low", "high", "estimate"))
    if all(isinstance(v, (int, float)) and math.isfinite(v) for v in (low, high)):
        parts.append(
            f'<line x1="{_x(low, span):.1f}" x2="{_x(high, span):.1f}" y1="{mid:.1f}" '
            f'y2="{mid:.1f}" stroke="{colour}" stroke-width="{thick}"></line>'
        )
    if isinstance(estimate, (int, float)) and math.isfinite(estimate):
        fill = colour if row["vote"] in ("for", "against", "undecided") else "#fff"
        parts.append(
            f'<circle cx="{_x(estimate, span):.1f}" cy="{mid:.1f}" r="{thick + 1}" fill="{fill}" '
            f'stroke="{colour}" stroke-width="1.5"></circle>'
        )
    parts.append("</g>")
    return "".join(parts)


def forest_svg(evidence: Sequence[Mapping[str, Any]]) -> str:
    """The forest plot of an item's `evidence` (`claim_verdicts` rows, part by part);
    empty when the item has no criterion."""
    if not evidence:
        return ""
    height = _ROW * len(evidence)
    rows = "".join(_row(row, i * _ROW) for i, row in enumerate(evidence))
    return (
        f'<svg class="forest" width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" '
        f'role="img" aria-label="95% intervals against thresholds">{rows}</svg>'
    )

r"""The answers table: one row per theory item, the table the findings page, the report page and
the README open with.

Each row (`Answer`) has five cells, each a function of the item's verdict entry (an entry of a
report document's `claim_verdicts`) and nothing else:

* **item** and **gist**: the item's id and its sentence in a few words (`items.json` `gist`);
* **answer** (`answer`): what the verdict says of the paper (`claims.direction`): `for the
  paper`, `against it`, or `open: <why>`, the why read from the verdict and its qualifier
  (`interval straddles`, `not tested: E12 not run` for an excluded experiment, `fragile under
  wine alone`,
  `contradicts C11`); `(exploratory)` follows an exploratory verdict;
* **deciding number** (`deciding_cell`): the criterion that decides the item
  (`deciding_criterion`), to two significant digits, as `E2 gd_path_gap 0.67 [0.47, 0.88],
  needs ≤ 0.05`; an item
  decided by algebra reads `identity (algebra)` (another form verified by gates: `algebra
  (gates of E1)`), one decided by reading the paper `by reading the text`, and one with no
  deciding criterion `—` (its answer says why);
* **rival** (`rival_cell`): the realistic negative control the deciding criterion was read
  against, named by the one mechanism it lacks (`a rival without EM's direction`), after
  `beat` when the criterion is met (the effect shows, and the rival, by its known-answer
  control, does not show it), `no better than` when it is not met (the effect is absent, as it
  is in the rival) and `vs` when it is undecided or its vote is (a requirement such as
  convergence failed).

**The deciding criterion** of an item is read from the parts that gave its verdict under its
rule (`decided_by`, parts beside the item left out) and the verdict by the rule alone
(`reading`: before an alternative made it fragile or a link inconsistent). Its candidates are
the criteria of those parts that cast the verdict's own vote: `for` a supported claim or a
standing objection, `against` a refuted claim or an answered objection, `undecided` an
inconclusive one (a mixed verdict: any vote). Of several, the registered primary criterion
comes first (`primary`), then the one whose interval ends nearest its threshold: the first
that would change the verdict were its interval to move. A verdict no criterion casts
(algebra, reading, not tested) has none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass
from functools import cache
from typing import Any

from implicit_em.pages import escape
from implicit_em.report.items.registry import ITEMS_FILE
from implicit_em.report.items.votes import ALGEBRA_WORDS
from implicit_em.report.judging.item_verdicts import FRAGILE
from implicit_em.report.rules.claims import DIRECTIONS, direction

__all__ = [
    "COLUMNS",
    "EXPLORATORY",
    "Answer",
    "answer",
    "answer_rows",
    "deciding_cell",
    "deciding_criterion",
    "gist",
    "html_table",
    "markdown_table",
    "rival_cell",
]

COLUMNS = ("item", "in a few words", "answer", "deciding number [95% interval]", "rival")
"""The columns of the answers table, in the order of `Answer`'s fields."""

_VOTE = {
    "supported": "for",
    "stands": "for",
    "refuted": "against",
    "answered": "against",
    "inconclusive": "undecided",
}
"""The vote a criterion casts for the verdict it decides (a mixed verdict: any vote)."""

EXPLORATORY = " †"
"""The mark after an exploratory verdict's answer (the legend says what it means)."""

_OPS = {"<=": "≤", ">=": "≥"}

_BEAT = {"met": "beat", "not met": "no better than", "undecided": "vs"}
"""How the deciding criterion's status sets the item's measurement beside its rival."""


@dataclass(frozen=True)
class Answer:
    """One row of the answers table (`COLUMNS`)."""

    item: str
    gist: str
    answer: str
    deciding: str
    rival: str


@cache
def _gists() -> dict[str, str]:
    data = json.loads(ITEMS_FILE.read_text(encoding="utf-8"))
    return {ident: str(entry.get("gist", "")) for ident, entry in data["items"].items()}


def gist(ident: str) -> str:
    """The item's sentence in a few words (`items.json` `gist`; '' when it states none)."""
    return _gists().get(ident, "")


def _open_why(item: Mapping[str, Any]) -> str:
    """Why an open verdict is open, in a few words."""
    verdict, qualifier = item["verdict"], item.get("qualifier") or ""
    if verdict == FRAGILE:
        return "fragile under " + ", ".join(item.get("fragile_under") or [qualifier])
    contradicted = [link["with"] for link in item.get("links", []) if link.get("contradicts")]
    if contradicted:
        return "contradicts " + ", ".join(contradicted)
    excluded = ", ".join(f"{x['experiment']} {x['verdict']}" for x in item.get("excluded", []))
    if excluded:
        qualifier = qualifier.replace("excluded", excluded, 1)
    if verdict == "inconclusive":
        return qualifier or verdict
    return f"{verdict}: {qualifier}" if qualifier else verdict


def answer(item: Mapping[str, Any]) -> str:
    """`for the paper`, `against it` or `open: <why>` for an item's verdict entry, followed by
    `EXPLORATORY` when the verdict is exploratory."""
    said = direction(item["id"], item["verdict"])
    text = {DIRECTIONS[0]: "for the paper", DIRECTIONS[1]: "against it"}.get(said)
    text = text or f"open: {_open_why(item)}"
    return text + (EXPLORATORY if item.get("exploratory") else "")


def _margin(c: Mapping[str, Any]) -> float:
    """How far a criterion's interval ends from its threshold (0 when it straddles it)."""
    low, high, threshold = c.get("low"), c.get("high"), c.get("threshold")
    if not all(isinstance(x, int | float) for x in (low, high, threshold)):
        return float("inf")
    return max(0.0, low - threshold, threshold - high)


def deciding_criterion(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The criterion that decides an item's verdict (the module's docstring says which), or
    None when no criterion casts it."""
    reading = item.get("reading", item["verdict"])
    if reading not in (*_VOTE, "mixed"):
        return None
    want = _VOTE.get(reading)
    decided = set(item.get("decided_by", []))
    candidates = [
        c
        for p in item.get("parts", [])
        if p["id"] in decided and not p.get("beside")
        for c in p.get("criteria", [])
        if c.get("vote", "no vote") != "no vote" and (want is None or c["vote"] == want)
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda c: (not c.get("primary"), _margin(c)))


def _number(x: Any) -> str:
    return f"{x:.2g}" if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def deciding_cell(item: Mapping[str, Any]) -> str:
    """The deciding number with its interval and threshold, or how the item is decided when no
    criterion decides it."""
    reading = item.get("reading", item["verdict"])
    if reading in ALGEBRA_WORDS:
        if item.get("form") == "identity":
            return "identity (algebra)"
        decided = set(item.get("decided_by", []))
        gated = {
            g["experiment"] for p in item.get("parts", []) if p["id"] in decided for g in p["gates"]
        }
        return f"algebra (gates of {', '.join(sorted(gated))})" if gated else "algebra"
    if item.get("qualifier") == "by reading":
        return "by reading the text"
    c = deciding_criterion(item)
    if c is None:
        return "—"
    interval = (
        f" [{_number(c['low'])}, {_number(c['high'])}]"
        if c.get("low") is not None and c.get("high") is not None
        else ""
    )
    op = _OPS.get(c["op"], c["op"])
    return (
        f"{c['experiment']} {c['number']} {_number(c.get('estimate'))}{interval}, "
        f"needs {op} {_number(c['threshold'])}"
    )


def _rival_name(c: Mapping[str, Any]) -> str:
    """The rival as the one mechanism it lacks: what its `removes` names before any colon or
    parenthesis ('' without a realistic negative control)."""
    control = c.get("negative_control") or {}
    if control.get("kind") != "realistic" or not control.get("removes"):
        return ""
    return control["removes"].split(":", 1)[0].split(" (", 1)[0].strip()


def rival_cell(item: Mapping[str, Any]) -> str:
    """The rival the deciding criterion beat, was no better than, or is undecided against;
    `—` without one."""
    c = deciding_criterion(item)
    name = _rival_name(c) if c is not None else ""
    if not name:
        return "—"
    status = "undecided" if c.get("vote") == "undecided" else c.get("status", "")
    return f"{_BEAT.get(status, 'vs')} a rival without {name}"


def answer_rows(items: Sequence[Mapping[str, Any]]) -> list[Answer]:
    """One row per item verdict entry, in the order given."""
    return [
        Answer(i["id"], gist(i["id"]), answer(i), deciding_cell(i), rival_cell(i)) for i in items
    ]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(rows: Sequence[Answer]) -> list[str]:
    """The answers table in Markdown, one line per row after the header and its rule."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(x) for x in astuple(row)) + " |" for row in rows]
    return lines


def html_table(rows: Sequence[Answer]) -> str:
    """The answers table in HTML (every cell escaped), each item linking to its row of the
    page's claims table (`#claim-C1`)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        f"<tr><td><a href='#claim-{escape(row.item)}'>{escape(row.item)}</a></td>"
        + "".join(f"<td>{escape(x)}</td>" for x in astuple(row)[1:])
        + "</tr>"
        for row in rows
    )
    return f"<table class='answers'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

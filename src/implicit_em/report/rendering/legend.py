r"""The legend: every rule an item is read by, stated once, for the findings page and the report
page.

`legend` returns the entries (a term and its text) from the rules themselves: the answers
table's columns (`rendering.answers`), each logical form (`forms.FORMS`), how parts combine
(`registry.RULES`), when a criterion votes, the verdict words, fragile, inconsistent and
exploratory (with the experiments of the run measured before the item rules in force were
registered), and how the blocks of the findings page are laid out (the report page, which has
no blocks, leaves that out). `legend_markdown` and `legend_html` write them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.pages import escape
from implicit_em.report.items.forms import FORMS
from implicit_em.report.items.registry import RULES, load_registry
from implicit_em.report.rendering.blocks import rules_after
from implicit_em.report.rendering.changes import id_order

__all__ = ["legend", "legend_html", "legend_markdown"]

_TABLE = (
    (
        "answer",
        "what the verdict says of the paper: for the paper, against it, or open, with why it "
        "is open (an interval that straddles its threshold, an experiment excluded because it "
        "was not run or is invalid, a part nothing measures, fragile under an alternative, a "
        "contradiction with a linked item).",
    ),
    (
        "deciding number",
        "the criterion that decides the item: of the criteria of the parts that gave the "
        "verdict, those that cast the verdict's own vote (for, against, or undecided for an "
        "inconclusive verdict); of several, the registered primary criterion, then the one whose "
        "interval ends nearest its threshold, the first to change the verdict. It reads "
        "experiment, number, estimate [95% interval over seeds] and the threshold it needs; "
        "identity (algebra) or algebra (gates of E1) when gates that verify an identity "
        "decide the item, by reading the text when the paper's own words do, and — when no "
        "criterion does (the answer says why).",
    ),
    (
        "rival",
        "the deciding criterion's realistic negative control: the same set-up without the one "
        "mechanism named. Beat: the criterion is met and the rival, by its known-answer control, "
        "is not; no better than: the criterion is not met, as the rival is not; vs: undecided, "
        "or held open (not converged).",
    ),
)

_WORDS = (
    (
        "votes",
        "a criterion votes for, against or undecided (its interval straddles the threshold) "
        "only when it counts: its known-answer controls came out as planted, its negative "
        "control is a realistic rival, and a rival it is compared with works on its own task. "
        "Otherwise it casts no vote, and the block says why (by construction, excluded: its "
        "experiment was not run or is invalid, no realistic negative control, not converged). "
        "Sanity gates hold by algebra or by implementation: a failed one makes its experiment "
        "invalid, and passed ones verify a part by algebra.",
    ),
    (
        "instances",
        "an existential item whose parts name an instance (C14d: each monitor must both detect "
        "the collapses and keep quiet where there is none) is read once per instance, from its "
        "own parts and the shared ones: one instance that holds every part answers it, it is "
        "refuted only when every instance is, and parts that hold in different instances never "
        "add up.",
    ),
    (
        "verdict words",
        "supported and refuted for a claim or a proposed test, stands and answered for an "
        "objection; mixed, inconclusive and not tested as the parts' rule says; verified "
        "(algebra) when every part holds by algebra, violated (algebra) when a gate that "
        "verifies one fails; by reading when the paper's text decides it. A qualifier in "
        "parentheses says why an open verdict is open.",
    ),
    (
        "fragile",
        "the item's verdict differs under a sound registered alternative (another measure of "
        "the same quantity, the first-stated threshold or measure, each data set alone): it "
        "reads fragile, naming the alternative. An alternative that is not sound (by "
        "construction, uncontrolled, without a working negative control, another mechanism, "
        "below the compared budget) is shown and flips nothing. A block lists the verdict "
        "under each registered alternative; where it lists none, none is registered.",
    ),
    (
        "inconsistent",
        "linked items whose confident verdicts contradict each other both read inconsistent.",
    ),
)

_BLOCKS = (
    "blocks",
    "each item's block quotes the parts of its sentence (Tested), gives each part's reading "
    "with its criteria and gates (Measured), the parts that decided the verdict and its "
    "verdict under each alternative (Verdict), the realistic rivals and whether each was told "
    "apart (Strongest rival), how far each voting criterion sits from its threshold and how it "
    "could fail (What would change it), and the earlier run's verdict. A criterion, gate, "
    "rival, link or reading beside the item that several items share is written out in the "
    "first block that shows it; later blocks name that block. Strongest rival None: no "
    "criterion of the item was read against a realistic rival (a trained model or real "
    "mechanism lacking just what it detects). No voting criterion: nothing measured votes on "
    "the item; a measurement with a realistic rival, or the gate that keeps one from voting "
    "passing, would change it.",
)


def _exploratory(items: Sequence[Mapping[str, Any]], blocks: bool) -> tuple[str, str]:
    before = sorted({e for i in items for e in rules_after(i)}, key=id_order)
    registered = load_registry().registered or "an unrecorded date"
    block = (
        ", and a block says only what else of its own changed after its data were seen"
        if blocks
        else ""
    )
    said = (
        f" In this run {', '.join(before)} {'were' if len(before) > 1 else 'was'} measured "
        f"before the item rules in force were registered ({registered}): every verdict they "
        f"vote on is exploratory{block}."
        if before
        else ""
    )
    return (
        "† exploratory",
        "the verdict rests on a rule changed after its data were seen, or on measurements "
        "started before the item rules in force were registered: it stands only once rerun on "
        f"fresh seeds.{said}",
    )


def legend(items: Sequence[Mapping[str, Any]], blocks: bool = True) -> list[tuple[str, str]]:
    """The legend's entries (term, text) for a run whose item verdict entries are `items`;
    with `blocks`, how the findings page's blocks read too."""
    forms = [(f"form: {name}", f"{text}.") for name, text in FORMS.items()]
    parts = (
        "parts",
        f"{RULES['all']} (for an objection, stands for supported and answered for refuted).",
    )
    layout = [_BLOCKS] if blocks else []
    return [*_TABLE, *forms, parts, *_WORDS, _exploratory(items, blocks), *layout]


def legend_markdown(entries: Sequence[tuple[str, str]]) -> list[str]:
    """The legend as a Markdown list, one entry a line."""
    return [f"- **{term}**: {text}" for term, text in entries]


def legend_html(entries: Sequence[tuple[str, str]]) -> str:
    """The legend as an HTML definition list (every text escaped)."""
    rows = "".join(f"<dt>{escape(t)}</dt><dd>{escape(text)}</dd>" for t, text in entries)
    return f"<dl>{rows}</dl>"

r"""The findings page's block per theory item: what is particular to the item, and nothing twice.

A block (`item_block`) says, from the item's verdict entry (`item_verdicts.claim_verdicts`):

* the item's kind, verdict and direction, and why it is exploratory where something of its own
  changed after its data were seen (that its experiments were measured before the item rules
  were registered is said once, in the legend);
* **Logical form**: the words that decide the form (the form's rule is in the legend);
* **Tested**: the sentence of each part, as its rule quotes it;
* **Measured**: each part's reading, with its criteria and gates;
* **Verdict**: the parts that decided it, its verdict under each registered alternative, and
  the links to other items;
* **Strongest rival**: the realistic rivals its criteria were read against (and whether each
  was told apart), with the baselines that had to work first;
* **What would change it**: for each criterion that voted, how far its interval sits from the
  threshold and how the protocol says it could fail;
* **Earlier run**: the earlier run's verdict and what changed it (the configuration keys are in
  the page's table beside the earlier run).

A criterion, gate, rival, reading beside the item or link that several items share is written
out in the first block that shows it; a later block names it and that block (`Shown`), so no
sentence of the page is repeated from block to block. The rules every block follows (the item
forms, how parts combine, the verdict words) are the legend's (`rendering.legend`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from implicit_em.report.judging.item_verdicts import verdict_label
from implicit_em.report.rendering.changes import what_changed
from implicit_em.report.rules.claims import CLAIMS, direction

__all__ = ["KINDS", "Shown", "item_block", "particular_exploratory_reason", "rules_after"]

KINDS = {"C": "Claim", "R": "Objection", "m": "Minor objection", "T": "Proposed test"}

Protocols = Mapping[tuple[str, str], Mapping[str, Any]]
"""A document's criteria entries by (experiment id, number)."""

_MEASURED_BEFORE = re.compile(r"(?:; )?\b(E\d+) was measured before the item rules were registered")
"""The exploratory reason every item of a run measured before the item rules shares."""


@dataclass
class Shown:
    """Where each shared thing was written out first: (kind, key) -> the item's id."""

    first: dict[tuple[str, str], str] = field(default_factory=dict)

    def under(self, kind: str, key: str, ident: str) -> str | None:
        """None the first time `key` of `kind` is shown (it is recorded as shown under the item
        `ident`), else the item it was shown under."""
        if (kind, key) in self.first:
            return self.first[(kind, key)]
        self.first[(kind, key)] = ident
        return None


def rules_after(item: Mapping[str, Any]) -> list[str]:
    """The experiments an item reads that were measured before the item rules in force were
    registered (one reason its verdict is exploratory)."""
    return _MEASURED_BEFORE.findall(item.get("exploratory_reason") or "")


def particular_exploratory_reason(item: Mapping[str, Any]) -> str:
    """Why an item is exploratory, less its experiments being measured before the item rules
    were registered ('' when that is all)."""
    return _MEASURED_BEFORE.sub("", item.get("exploratory_reason") or "").strip("; ")


def _number(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    return f"{x:.3g}"


def _interval(c: Mapping[str, Any]) -> str:
    """`estimate [low, high]` of a criterion entry, or its single value."""
    if c.get("low") is None or c.get("high") is None:
        return _number(c.get("estimate"))
    return f"{_number(c['estimate'])} [{_number(c['low'])}, {_number(c['high'])}]"


def _sentence(text: str) -> str:
    return f"{text[0].upper()}{text[1:]}" if text else ""


def _vote(c: Mapping[str, Any]) -> str:
    vote = c.get("vote", "")
    return f"votes {vote}" if vote and vote != "no vote" else f"no vote ({c.get('standing', '')})"


def _criterion_line(c: Mapping[str, Any], protocol: Mapping[str, Any], seen: str | None) -> str:
    ref = f"`{c['experiment']}:{c['number']}`"
    if seen is not None:
        measured = "not measured" if c.get("estimate") is None else "numbers"
        return f"  - {ref} ({measured} under {seen}): {_vote(c)}."
    said = f" {_sentence(protocol['means'])}." if protocol.get("means") else ""
    if c.get("estimate") is None:
        return f"  - {ref} not measured in this run.{said}"
    method = protocol.get("method_name") or c.get("method") or ""
    seeds = protocol.get("seeds")
    how = f"{method}, {seeds} seeds" if seeds else method
    return (
        f"  - {ref} {_interval(c)} ({how}), needs {c['op']} {_number(c['threshold'])}: "
        f"**{c['status']}**; {_vote(c)}.{said}"
    )


def _gate_line(g: Mapping[str, Any], seen: str | None) -> str:
    word = {True: "passed", False: "failed", None: "not measured"}[g["passed"]]
    ref = f"gate `{g['experiment']}:{g['name']}` {word}"
    return f"  - {ref} (under {seen})." if seen is not None else f"  - {ref}: {g['detail']}."


def _part_line(part: Mapping[str, Any], ident: str, shown: Shown) -> str:
    reason = part.get("reason") or ""
    if reason == "; ".join(g["detail"] for g in part["gates"]):
        reason = ""  # the gates below say it
    line = f"- *{part['id']}*: {part['reading']}" + (f" ({reason})" if reason else "")
    beside = part.get("beside")
    if beside:
        seen = shown.under("beside", beside, ident)
        where = "above" if seen == ident else f"see {seen}"
        line += (
            f"; beside the item, casting no vote: {beside}."
            if seen is None
            else (f" (beside: {where}).")
        )
    return line


def _measured(item: Mapping[str, Any], protocols: Protocols, shown: Shown) -> list[str]:
    ident, lines = item["id"], []
    for part in item["parts"]:
        lines.append(_part_line(part, ident, shown))
        for c in part["criteria"]:
            key = f"{c['experiment']}:{c['number']}"
            seen = shown.under("criterion", key, ident)
            protocol = protocols.get((c["experiment"], c["number"]), {})
            lines.append(_criterion_line(c, protocol, None if seen == ident else seen))
        for g in part["gates"]:
            seen = shown.under("gate", f"{g['experiment']}:{g['name']}", ident)
            lines.append(_gate_line(g, None if seen == ident else seen))
    return lines


def _rivals(item: Mapping[str, Any], protocols: Protocols, shown: Shown) -> list[str]:
    ident, lines, said = item["id"], [], set()
    for part in item["parts"]:
        for c in part["criteria"]:
            control = c.get("negative_control") or {}
            what = control.get("removes") or control.get("why")
            if control.get("kind") != "realistic" or not what or what in said:
                continue
            said.add(what)
            ref = f"`{c['experiment']}:{c['number']}`"
            seen = shown.under("rival", ref, ident)
            if seen is not None:
                lines.append(f"- {ref}: as under {seen}.")
                continue
            negative = (c.get("controls") or {}).get("negative", "not run")
            told = "told apart" if negative == "not met" else "not told apart"
            lines.append(
                f"- {ref} against a rival without {what}: its negative control read "
                f"**{negative}** ({told})."
            )
            baseline = protocols.get((c["experiment"], c["number"]), {}).get("baseline")
            if baseline:
                first = shown.under("baseline", baseline["says"], ident)
                says = f": {baseline['says']}" if first in (None, ident) else f" (see {first})"
                lines.append(f"  - first the rival had to work{says}.")
    return lines or ["- None."]


def _margin(c: Mapping[str, Any]) -> str:
    low, high, threshold = c.get("low"), c.get("high"), c.get("threshold")
    if low is None or high is None or not isinstance(threshold, int | float):
        return f"its value {_number(c.get('estimate'))} against {c['op']} {_number(threshold)}"
    if low <= threshold <= high:
        more = c.get("seeds_to_decide")
        return f"its interval straddles {_number(threshold)}" + (
            f" (about {more} seeds would decide it)" if more else ""
        )
    side = high if high < threshold else low
    return f"its interval ends {_number(abs(threshold - side))} from {_number(threshold)}"


def _failure(how: str) -> str:
    """The protocol's `how_it_could_fail` as the end of `It could fail if ...`."""
    how = re.sub(r"^if\s+", "", how.strip(), flags=re.I)
    return f"{how[0].lower()}{how[1:]}" if how else ""


def _changes(item: Mapping[str, Any], protocols: Protocols, shown: Shown) -> list[str]:
    ident, lines = item["id"], []
    for part in item["parts"]:
        for c in [] if part.get("beside") else part["criteria"]:
            if c.get("vote", "no vote") == "no vote":
                continue
            ref = f"`{c['experiment']}:{c['number']}`"
            seen = shown.under("change", ref, ident)
            if seen is not None:
                lines.append(f"- {ref}: as under {seen}.")
                continue
            how = protocols.get((c["experiment"], c["number"]), {}).get("how_it_could_fail")
            lines.append(
                f"- {ref}: {_margin(c)}." + (f" It could fail if {_failure(how)}." if how else "")
            )
    if item.get("fragile_under"):
        lines.append(f"- Already changed under {', '.join(item['fragile_under'])}.")
    return lines or ["- No voting criterion."]


def _alternatives(item: Mapping[str, Any]) -> str:
    """The verdict under each registered alternative (those that read alike named together), and
    whether one flips it ('' when none is registered)."""
    alternatives = [a for a in item.get("alternatives", []) if a.get("available", True)]
    if not alternatives:
        return ""
    groups: dict[tuple[str, str], list[str]] = {}  # (verdict, kind of reading): alternatives
    for a in alternatives:
        reading = a.get("reading", "sound")
        kind = "" if reading == "sound" else f" (a reading {reading}: cannot flip)"
        groups.setdefault((verdict_label(a), kind), []).append(a["id"])
    shown = "; ".join(
        ", ".join(f"*{i}*" for i in ids) + f": {v}{kind}" for (v, kind), ids in groups.items()
    )
    flips = [a["id"] for a in alternatives if a.get("flips")]
    head = f"fragile: it flips under {', '.join(flips)}" if flips else "robust"
    return f" Alternatives ({head}): {shown}."


def _links(item: Mapping[str, Any], shown: Shown) -> list[str]:
    lines = []
    for link in item.get("links", []):
        state = "they contradict each other" if link["contradicts"] else "no contradiction"
        pair = ":".join(sorted((item["id"], link["with"])))
        seen = shown.under("link", pair, item["id"])
        said = f": {link['reason']} ({state})" if seen is None else f" (see {seen}): {state}"
        lines.append(f"Linked with {link['with']}{said}.")
    return lines


def _short_why(why: str) -> str:
    """What changed a verdict, its configuration named by experiment alone."""
    return re.sub(
        r"configuration \(([^)]*)\)",
        lambda m: "configuration (" + ", ".join(re.findall(r"\bE\d+(?=:)", m[1])) + ")",
        why,
    )


def _earlier(
    item: Mapping[str, Any],
    earlier: Mapping[str, Any],
    meta: Mapping[str, Any],
    earlier_meta: Mapping[str, Any],
    configs: Mapping[str, Mapping[str, Any]] | None,
    earlier_configs: Mapping[str, Mapping[str, Any]] | None,
) -> str:
    why = what_changed(item, earlier, meta, earlier_meta, configs, earlier_configs)
    was = f"**Earlier run:** **{verdict_label(earlier)}**"
    return f"{was}. Unchanged." if why is None else f"{was}. Changed by: {_short_why(why)}."


def item_block(
    item: Mapping[str, Any],
    protocols: Protocols,
    shown: Shown,
    earlier: Mapping[str, Any] | None = None,
    earlier_meta: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    earlier_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The block of one item (the module's docstring says what it holds); `shown` records what
    earlier blocks wrote out. With `earlier` and both runs' `meta` and configurations, the
    earlier run's verdict and what changed it."""
    ident = item["id"]
    exploratory = " †" if item.get("exploratory") else ""
    particular = particular_exploratory_reason(item) if exploratory else ""
    lines = [
        f"## {ident}: {CLAIMS[ident]}",
        "",
        f"{KINDS[ident[0]]}. **{verdict_label(item)}**, "
        f"{direction(ident, item['verdict'])}{exploratory}.",
        *([f"Exploratory because {particular}."] if particular else []),
        "",
        *[f"**Logical form.** {f}: {item.get('form_why', '')}.\n" for f in [item.get("form")] if f],
        "**Tested.**",
        *[f"- *{p['id']}*: “{p['quote']}”" for p in item["parts"] if p.get("quote")],
        "",
        "**Measured.**",
        *_measured(item, protocols, shown),
        "",
        "**Verdict.** "
        + (f"Decided by: {', '.join(item['decided_by'])}." if item.get("decided_by") else "")
        + _alternatives(item),
        *_links(item, shown),
        "",
        "**Strongest rival.**",
        *_rivals(item, protocols, shown),
        "",
        "**What would change it.**",
        *_changes(item, protocols, shown),
    ]
    if earlier is not None and earlier_meta is not None and meta is not None:
        lines += ["", _earlier(item, earlier, meta, earlier_meta, configs, earlier_configs)]
    return "\n".join(lines)

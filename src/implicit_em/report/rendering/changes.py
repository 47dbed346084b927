"""What changed an item's verdict between two runs: its rule, a measurement, the scale (the
report's size) or the configuration of an experiment it reads.

`changed_by` compares an item's entry in two documents' item verdicts; `configuration_changes`
names the keys of an experiment's configuration that differ between two runs, leaving out what
says only which seeds ran and where (seed lists, `EXECUTION_KEYS`). `what_changed` says it in
words for one item (None when its verdict did not change), and `changes_table` is the findings
page's section that sets every item's two verdicts side by side with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from implicit_em.report.judging.item_verdicts import verdict_label
from implicit_em.report.rules.claims import CLAIMS

__all__ = [
    "EXECUTION_KEYS",
    "changed_by",
    "changes_table",
    "configs_of",
    "configuration_changes",
    "id_order",
    "what_changed",
]


EXECUTION_KEYS = frozenset({"label", "runs_dir", "workers", "device", "threads"})
"""Configuration keys that say where and how a run was executed, not what it measured."""


def configuration_changes(now: Mapping[str, Any], then: Mapping[str, Any]) -> list[str]:
    """The top-level keys of an experiment's configuration whose values differ between `now`
    and `then`, seed lists (a key `seeds` or ending in `_seeds`, at any depth) and
    `EXECUTION_KEYS` left out."""

    def design(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                k: design(v)
                for k, v in value.items()
                if not (k == "seeds" or k.endswith("_seeds") or k in EXECUTION_KEYS)
            }
        if isinstance(value, list | tuple):
            return [design(v) for v in value]
        return value

    now, then = design(now), design(then)
    return sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))


def changed_by(
    item: Mapping[str, Any],
    earlier: Mapping[str, Any],
    size: str,
    earlier_size: str,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    earlier_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """What differs between an item's entry and its `earlier` entry: `rule` (its parts or their
    criteria and gates), `measurement` (a shared criterion's estimate), `scale` (the size
    of the run) and, given both runs' configurations by experiment id, `configuration (E10:
    budget, tasks)` for each experiment the item reads whose configuration changed
    (`configuration_changes`)."""

    def refs(entry: Mapping[str, Any]) -> set[tuple[str, ...]]:
        return {
            (p["id"], c["experiment"], c.get("number") or c.get("name"))
            for p in entry.get("parts", [])
            for c in [*p.get("criteria", []), *p.get("gates", [])]
        }

    def estimates(entry: Mapping[str, Any]) -> dict[tuple[str, str], Any]:
        return {
            (c["experiment"], c["number"]): c.get("estimate")
            for p in entry.get("parts", [])
            for c in p.get("criteria", [])
        }

    reasons = []
    if refs(item) != refs(earlier) or item.get("rule") != earlier.get("rule"):
        reasons.append("rule")
    now, then = estimates(item), estimates(earlier)
    if any(now[k] != then[k] for k in now.keys() & then.keys()):
        reasons.append("measurement")
    if size != earlier_size:
        reasons.append("scale")
    elif configs is not None and earlier_configs is not None:
        read = sorted({e for _, e, _ in refs(item) | refs(earlier)}, key=id_order)
        changed = [
            f"{e}: {', '.join(keys)}"
            for e in read
            if e in configs and e in earlier_configs
            if (keys := configuration_changes(configs[e], earlier_configs[e]))
        ]
        if changed:
            reasons.append(f"configuration ({'; '.join(changed)})")
    return reasons


def id_order(ident: str) -> tuple[int, str]:
    """The sort key that puts experiment ids in their numeric order (E2 before E10)."""
    digits = "".join(c for c in ident if c.isdigit())
    return (int(digits) if digits else 0, ident)


def configs_of(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Each experiment's configuration in the document `doc`, by id."""
    return {e["id"]: e.get("config") or {} for e in doc.get("experiments", [])}


def what_changed(
    item: Mapping[str, Any],
    earlier: Mapping[str, Any],
    meta: Mapping[str, Any],
    earlier_meta: Mapping[str, Any],
    configs: Mapping[str, Mapping[str, Any]] | None,
    earlier_configs: Mapping[str, Mapping[str, Any]] | None,
) -> str | None:
    """None when the item's verdict is the earlier run's, else what changed it (`changed_by`,
    or the links between items when nothing of its own did)."""
    if earlier["verdict"] == item["verdict"]:
        return None
    why = changed_by(
        item, earlier, meta.get("size", ""), earlier_meta.get("size", ""), configs, earlier_configs
    )
    return ", ".join(why) or "links between items"


def changes_table(
    items: Mapping[str, Mapping[str, Any]],
    earlier_items: Mapping[str, Mapping[str, Any]],
    meta: Mapping[str, Any],
    earlier_meta: Mapping[str, Any],
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    earlier_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """The section that sets every item's verdict beside the earlier run's, one row each, in
    the paper's order, naming what changed each verdict that changed."""
    lines = [
        f"## Beside the earlier run ({earlier_meta.get('date', '?')})",
        "",
        f"Each item's verdict in the earlier {earlier_meta.get('size', '?')}-size run, read "
        "under the same item rules, beside this run's. A verdict that changed names what "
        "changed it: the item's rule, a measurement, the scale, or the configuration of an "
        "experiment it reads.",
        "",
        "| item | earlier run | this run | what changed |",
        "|---|---|---|---|",
    ]
    changed = 0
    for ident in CLAIMS:
        if ident not in items:
            continue
        item, earlier = items[ident], earlier_items.get(ident)
        if earlier is None:
            lines.append(f"| {ident} | not in that run | {verdict_label(item)} | a new item |")
            changed += 1
            continue
        why = what_changed(item, earlier, meta, earlier_meta, configs, earlier_configs)
        changed += why is not None
        was, now = verdict_label(earlier), verdict_label(item)
        same = "unchanged" if was == now else "unchanged (its alternatives read otherwise)"
        cells = (ident, was, now, why or same)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    shown = sum(1 for ident in CLAIMS if ident in items)
    lines += ["", f"{changed} of {shown} verdicts changed."]
    return lines

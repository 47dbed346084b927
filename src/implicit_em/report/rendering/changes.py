"""What changed an item's verdict between two runs: its rule, a measurement, the scale (the
report's size) or the configuration of an experiment it reads.

`changed_by` compares an item's entry in two documents' item verdicts; `configuration_changes`
names the keys of an experiment's configuration that differ between two runs, leaving out what
says only which seeds ran and where (seed lists, `EXECUTION_KEYS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EXECUTION_KEYS", "changed_by", "configs_of", "configuration_changes", "id_order"]


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

r"""Protocols: each experiment's rule, seeds, budgets and data, as data with a content hash.

A protocol is the JSON file `protocols/<ID>.json` beside this module. It holds everything that
decides a verdict, fixed before the confirmatory run:

* `criteria`: number, op, threshold, theory item (`claim`), direction, interval `method`, how
  per-data-set readings `combine`, the `bounds` its quantity cannot leave, whether it is the
  item's `primary` criterion, and what is only shown or checked: its prose (`means`, `quote`,
  `how_it_could_fail`), the gap between its modes (`modes_gap`) and the `units` its values
  stand for (one per seed unless declared);
  besides, the marks that say how an item reads it (`ITEM_MARKS`: `by_construction`, the kind
  of its `negative_control`, the `baseline` a comparison needs working, the conditions it
  `requires` to be read at all), which
  `implicit_em.report.items.marks` reads;
* `gates`: number, op, threshold, and the theory item a gate verifies by algebra (`verifies`);
* `sizes`: the configuration at each size of `SIZES` (`smoke`, `quick`, `full`) and of the
  known-answer controls (`control`): seeds, budgets, data sets and their sizes.

The experiment module keeps only measurement code. `Protocol.hash` is the SHA-256 of the
decision-relevant content (everything but what is only shown and the item marks), so that rewording a
sentence is not an amendment and changing a threshold, a seed or a budget is. The item marks
decide item verdicts, not the experiment's: they are hashed with the item registry
(`implicit_em.report.items.registry.registry_hash`). Which hashes were registered, when,
and each amendment's reason live in `protocols/registry.json` (`implicit_em.report.rules.registration`).

Seeds: development and quick seeds are below `CONFIRMATION_SEEDS`; full-size (confirmatory)
seeds are at or above it and have never been run at any other size. A configuration's seeds are
those of every `seeds` list in it, nested ones included (`seed_lists`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from implicit_em.report.judging.rule import Criterion, Gate, Rule

__all__ = [
    "CONFIRMATION_SEEDS",
    "ITEM_MARKS",
    "PROTOCOL_DIR",
    "PROTOCOL_SIZES",
    "Protocol",
    "load_protocol",
    "seed_lists",
]

PROTOCOL_DIR = Path(__file__).parents[1] / "protocols"
"""Where the protocol files and the registry live (package data)."""

PROTOCOL_SIZES = ("smoke", "quick", "full", "control")
"""The configurations a protocol holds: the report's three sizes and the controls' one."""

CONFIRMATION_SEEDS = 1000
"""Full-size seeds are >= this; every other size's seeds are below it."""

_PROSE = ("means", "quote", "how_it_could_fail", "modes_gap", "units")
"""What a verdict does not read (shown, or checked): left out of `Protocol.hash`."""
ITEM_MARKS = ("by_construction", "negative_control", "baseline", "requires")
"""Criterion keys read by the item verdicts, not by the experiment's rule."""


@dataclass(frozen=True)
class Protocol:
    """One experiment's registered rule, as read from `protocols/<ID>.json`.

    Attributes
    ----------
    id : str
    criteria : tuple of Criterion
    gates : tuple of Gate
    sizes : mapping
        Configuration per size of `PROTOCOL_SIZES`.
    data : mapping
        The file's content, as parsed (what `hash` reads).
    """

    id: str
    criteria: tuple[Criterion, ...]
    gates: tuple[Gate, ...]
    sizes: Mapping[str, Mapping[str, Any]]
    data: Mapping[str, Any]

    @property
    def rule(self) -> Rule:
        return Rule(self.criteria, self.gates)

    @property
    def hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the decision-relevant content: the file without
        the criteria's and gates' prose."""
        return content_hash(self.data)

    def seeds(self, size: str) -> list[int]:
        return [int(s) for s in self.sizes[size].get("seeds", [])]

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Protocol:
        """A protocol from its parsed file (`ValueError` naming what is wrong)."""
        ident = data.get("id")
        missing = [k for k in ("id", "criteria", "sizes") if k not in data]
        if missing:
            raise ValueError(f"protocol {ident}: missing {', '.join(missing)}")
        sizes = data["sizes"]
        if set(sizes) != set(PROTOCOL_SIZES):
            raise ValueError(f"protocol {ident}: sizes must be exactly {PROTOCOL_SIZES}")
        try:
            criteria = tuple(
                Criterion(**{k: v for k, v in c.items() if k not in ITEM_MARKS})
                for c in data["criteria"]
            )
            gates = tuple(Gate(**g) for g in data.get("gates", []))
        except TypeError as err:
            raise ValueError(f"protocol {ident}: {err}") from err
        primaries = [c.number for c in criteria if c.primary]
        if len(set(primaries)) != len(primaries):
            raise ValueError(f"protocol {ident}: a number is primary for more than one item")
        for size in PROTOCOL_SIZES:
            seeds = [int(s) for s in sizes[size].get("seeds", [])]
            confirmatory = [s >= CONFIRMATION_SEEDS for s in seeds]
            if size == "full" and not all(confirmatory):
                raise ValueError(
                    f"protocol {ident}: full-size seeds must be >= {CONFIRMATION_SEEDS} "
                    "(confirmation seeds, never used in development)"
                )
            if size != "full" and any(confirmatory):
                raise ValueError(
                    f"protocol {ident}: {size} seeds must be below {CONFIRMATION_SEEDS} "
                    "(those are kept for the confirmatory full-size run)"
                )
        return cls(str(ident), criteria, gates, sizes, data)


def content_hash(data: Mapping[str, Any]) -> str:
    """The hash of a protocol's decision-relevant content (its prose and item marks left out)."""
    relevant = {
        **data,
        "criteria": [
            {k: v for k, v in c.items() if k not in _PROSE + ITEM_MARKS}
            for c in data.get("criteria", [])
        ],
        "gates": [{k: v for k, v in g.items() if k not in _PROSE} for g in data.get("gates", [])],
    }
    blob = json.dumps(relevant, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def seed_lists(config: Any) -> list[int]:
    """Every seed of every `seeds` list in `config` (a size's configuration), at any depth: a
    part of an experiment that trains on seeds of its own keeps them in a nested `seeds` list
    (E9's `topk.seeds`)."""
    if not isinstance(config, Mapping):
        return []
    out: list[int] = []
    for key, value in config.items():
        if key == "seeds" and isinstance(value, list):
            out.extend(int(s) for s in value)
        else:
            out.extend(seed_lists(value))
    return out


@cache
def load_protocol(experiment_id: str, folder: Path = PROTOCOL_DIR) -> Protocol:
    """The protocol of `experiment_id` (`"E4"`) from `folder/<ID>.json`."""
    path = folder / f"{experiment_id}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"protocol {experiment_id}: cannot read {path} ({err})") from err
    protocol = Protocol.from_data(data)
    if protocol.id != experiment_id:
        raise ValueError(f"{path}: its id is {protocol.id!r}, not {experiment_id!r}")
    return protocol

"""Replication: the report run on seeds a referee picks (`implicit-em report --seeds`).

`--seeds 2000-2009` (or `2000,2003`, or both: `2000-2004,2010`) replaces every seed list of every
experiment's size configuration, nested ones included (any key named `seeds`), by those seeds;
`--seed-offset N` shifts each of them by N instead, keeping each experiment's count. The known-answer
controls keep their registered `control` seeds: they test the measurement, not the claim. The seeds
are part of the configuration, hence of the cache key.

A replication's page and `results.json` say so (`meta["replication"]`) and compare its verdicts
with the published ones. Seeds are **fresh** when none was ever used: not below
`CONFIRMATION_SEEDS` (the development and quick range), not in any protocol at any size, and not
among the seeds an amendment had seen (`registry.json`). Used seeds are allowed, and flagged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from implicit_em.report.rules.protocol import CONFIRMATION_SEEDS, PROTOCOL_DIR, seed_lists
from implicit_em.report.rules.registration import read_registry

__all__ = [
    "MAX_COUNT",
    "MAX_SEED",
    "Replication",
    "parse_seeds",
    "replication",
    "seed_text",
    "used_seeds",
]

MAX_SEED = 2**32 - 1
"""The largest seed numpy and torch both accept."""

MAX_COUNT = 10_000
"""The most seeds one replication may name."""

_PART = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_seeds(text: str) -> list[int]:
    """The seeds of `text`: comma-separated whole numbers and ranges `a-b` (both ends included),
    in the order given. `ValueError` naming `--seeds` when a part is not one, a range runs
    backwards, a seed is out of range or repeats."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        match = _PART.match(part)
        if not match:
            raise ValueError(
                f"--seeds {text!r}: expected whole numbers and ranges such as 2000-2009 or "
                f"2000,2003, got {part!r}"
            )
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low:
            raise ValueError(f"--seeds {text!r}: the range {part} runs backwards")
        if high > MAX_SEED:
            raise ValueError(f"--seeds {text!r}: seeds must be at most {MAX_SEED}")
        if len(seeds) + high - low + 1 > MAX_COUNT:
            raise ValueError(f"--seeds {text!r}: at most {MAX_COUNT} seeds")
        seeds.extend(range(low, high + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"--seeds {text!r}: seeds must be distinct, {repeated[0]} repeats")
    return seeds


@dataclass(frozen=True)
class Replication:
    """Seeds a referee picked: an explicit list (`seeds`) or a shift of every list (`offset`)."""

    seeds: tuple[int, ...] = ()
    offset: int = 0

    def apply(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """`config` with every `seeds` list, at any depth, replaced or shifted."""
        return _replaced(config, self)

    @property
    def label(self) -> str:
        if self.seeds:
            return f"seeds {seed_text(self.seeds)}"
        return f"every experiment's seeds shifted by {self.offset}"

    def as_dict(self, measured: Iterable[int]) -> dict[str, Any]:
        """What `results.json` records of it, with the `measured` seeds (all experiments) and
        those of them used before (`used_seeds`): none means fresh."""
        seeds = sorted(set(measured))
        used = used_seeds()
        stale = [s for s in seeds if s < CONFIRMATION_SEEDS or s in used]
        return {
            "label": self.label,
            "seeds": list(self.seeds),
            "offset": self.offset,
            "measured_seeds": seeds,
            "not_fresh": stale,
            "fresh": not stale,
        }


def _replaced(value: Any, rep: Replication) -> Any:
    if isinstance(value, Mapping):
        return {
            k: (_seeds(v, rep) if k == "seeds" else _replaced(v, rep)) for k, v in value.items()
        }
    return value


def _seeds(seeds: Any, rep: Replication) -> list[int]:
    if rep.seeds:
        return list(rep.seeds)
    return [int(s) + rep.offset for s in seeds]


def replication(seeds: str | None, offset: int | None) -> Replication | None:
    """The replication that `--seeds` and `--seed-offset` ask for (None: neither given);
    `ValueError` naming the option when they are bad or given together."""
    if seeds is not None and offset is not None:
        raise ValueError("--seeds and --seed-offset: give one of them, not both")
    if seeds is not None:
        return Replication(seeds=tuple(parse_seeds(seeds)))
    if offset is None:
        return None
    if not 1 <= offset <= MAX_SEED // 2:
        raise ValueError(
            f"--seed-offset {offset}: expected a whole number from 1 to {MAX_SEED // 2}"
        )
    return Replication(offset=offset)


def used_seeds(folder: Path = PROTOCOL_DIR) -> set[int]:
    """Every seed a protocol names at any size (controls included), and every seed an
    amendment had seen (`registry.json` in `folder`)."""
    used: set[int] = set()
    for path in folder.glob("E*.json"):
        used.update(seed_lists(json.loads(path.read_text(encoding="utf-8")).get("sizes", {})))
    for entry in read_registry(folder / "registry.json").values():
        amendments = [*entry.get("history", [])]
        amendments += [v["amendment"] for v in entry.get("versions", []) if v.get("amendment")]
        for a in amendments:
            used.update(int(s) for s in a.get("seeds_seen", []))
    return used


def seed_text(seeds: Iterable[int]) -> str:
    """Seeds as ranges: `2000-2009, 2012`."""
    ordered = sorted(set(seeds))
    parts: list[str] = []
    start = prev = None
    for s in [*ordered, None]:
        if s is not None and prev is not None and s == prev + 1:
            prev = s
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    return ", ".join(parts)

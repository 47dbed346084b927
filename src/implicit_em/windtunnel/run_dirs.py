"""The folder of a wind-tunnel run: where `implicit-em windtunnel`, `grid` and the report find it.

A run's folder is named by its task, model, objective, scale and seed, then the first 8 hex
digits of the SHA-1 of its whole configuration (`json.dumps(asdict(config), sort_keys=True)`),
so two configurations that differ in any field never share a folder, and the same
configuration always finds its cached result. A run traced every N steps appends `-trace<N>`;
seeds trained together share one folder named by their first and last seed and the hash of the
configuration without its seed. These names are the cache's keys: changing them orphans every
finished run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from implicit_em.windtunnel.config import RunConfig

__all__ = ["run_dir", "seeds_dir"]


def run_dir(out: Path, config: RunConfig, scale: str, trace_every: int | None = None) -> Path:
    """The directory of `config`: readable fields plus a hash of the whole configuration, and
    `-trace<N>` for a run traced every N steps."""
    digest = hashlib.sha1(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:8]
    name = f"{config.task}-{config.model}-{config.objective}-{scale}-s{config.seed}-{digest}"
    return out / (name if trace_every is None else f"{name}-trace{trace_every}")


def seeds_dir(out: Path, config: RunConfig, scale: str, seeds: list[int]) -> Path:
    """The directory of `config`'s `seeds` trained together: readable fields, the first and
    last seed, and a hash of the configuration without its seed."""
    fields = {k: v for k, v in asdict(config).items() if k != "seed"}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
    name = f"{config.task}-{config.model}-{config.objective}-{scale}"
    return out / f"{name}-seeds{seeds[0]}-{seeds[-1]}-{digest}"

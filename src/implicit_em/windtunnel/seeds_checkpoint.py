"""Checkpoints of seeds trained together: tensors in one file, the configuration in JSON beside it.

`seeds.pt` holds only tensors and plain containers of numbers and strings, so it loads with
`torch.load(..., weights_only=True)`: the stacked parameters and AdamW moments of the seeds
still training, the Adam step count, each seed's data-generator state, and each seed's
progress (step, curves, training time, sessions, running loss). `seeds.json` beside it holds
the configuration (seed aside) and the seeds in training, in the order of the stacked rows.
Both are written to a temporary name and renamed; the JSON last, so a JSON always describes a
complete tensor file. A checkpoint of another configuration or other seeds is refused, naming
what differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from implicit_em.windtunnel.checkpoint import Progress, refuse_other, save_atomic, write_json

__all__ = ["SEEDS_CHECKPOINT", "SEEDS_STATE", "SeedsState", "load_seeds", "save_seeds"]

SEEDS_CHECKPOINT = "seeds.pt"
"""The tensors of seeds trained together (loaded with `weights_only=True`)."""
SEEDS_STATE = "seeds.json"
"""Beside it, as JSON: the configuration and the seeds in training."""


@dataclass
class SeedsState:
    """What the seeds in training have: their stacked tensors and per-seed progress."""

    seeds: list[int]
    params: dict[str, Tensor]
    optimizer: dict[str, Any]
    data_rng: list[Tensor]
    progress: list[Progress]


def _progress_dict(p: Progress) -> dict[str, Any]:
    return {
        "history": p.history,
        "step": p.step,
        "elapsed": p.elapsed,
        "sessions": p.sessions,
        "running": list(p.running),
    }


def _progress(d: dict[str, Any]) -> Progress:
    return Progress(
        history=d["history"],
        step=d["step"],
        elapsed=d["elapsed"],
        sessions=d["sessions"],
        running=(d["running"][0], d["running"][1]),
    )


def save_seeds(directory: Path, config: dict[str, Any], state: SeedsState) -> None:
    """Write `state` to `directory/seeds.pt` and the configuration to `seeds.json`, atomically."""
    tensors = {
        "params": {n: p.detach().cpu() for n, p in state.params.items()},
        "optimizer": {
            "steps": state.optimizer["steps"],
            "exp_avg": {n: t.cpu() for n, t in state.optimizer["exp_avg"].items()},
            "exp_avg_sq": {n: t.cpu() for n, t in state.optimizer["exp_avg_sq"].items()},
        },
        "data_rng": state.data_rng,
        "progress": [_progress_dict(p) for p in state.progress],
    }
    save_atomic(tensors, directory / SEEDS_CHECKPOINT)
    write_json({"config": config, "seeds": state.seeds}, directory / SEEDS_STATE)


def load_seeds(
    directory: Path, config: dict[str, Any], unfinished: list[int], finished: set[int]
) -> SeedsState | None:
    """The state saved in `directory` of the `unfinished` seeds, in that order (None when
    there is none).

    The checkpoint may also hold seeds in `finished` (a stop between writing a seed's result
    and the next checkpoint): their rows are dropped; one that holds only such seeds is done
    with (None). `ValueError` when it belongs to another
    configuration or trains other seeds.
    """
    meta_path = directory / SEEDS_STATE
    if not meta_path.exists():
        return None
    meta = json.loads(meta_path.read_text())
    refuse_other(meta_path, meta["config"], config)
    saved_seeds: list[int] = meta["seeds"]
    if all(s in finished for s in saved_seeds):
        return None  # every seed it held has its result: nothing to resume
    if [s for s in saved_seeds if s not in finished] != unfinished:
        raise ValueError(
            f"{meta_path} trains seeds {saved_seeds}, not the unfinished seeds asked for "
            f"({unfinished}); ask for the same seeds, or use another directory"
        )
    saved = torch.load(directory / SEEDS_CHECKPOINT, map_location="cpu", weights_only=True)
    rows = [saved_seeds.index(s) for s in unfinished]
    index = torch.tensor(rows, dtype=torch.long)
    optimizer = saved["optimizer"]
    return SeedsState(
        seeds=unfinished,
        params={n: p[index] for n, p in saved["params"].items()},
        optimizer={
            "steps": optimizer["steps"],
            "exp_avg": {n: t[index] for n, t in optimizer["exp_avg"].items()},
            "exp_avg_sq": {n: t[index] for n, t in optimizer["exp_avg_sq"].items()},
        },
        data_rng=[saved["data_rng"][r] for r in rows],
        progress=[_progress(saved["progress"][r]) for r in rows],
    )

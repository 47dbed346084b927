r"""Freeze one part of the transformer at step $t$ and keep training the other (claim C12).

For one configuration and seed (a split transformer, `split_qkv=True`), `run_interventions`
trains the full run to its cap, keeping its training state at every freeze step $t$, then for
each $t$ branches two runs from that state: one with the routing (the attention's query and key
projections) frozen from $t$ on, one with the rest (values, output projections, MLPs,
embeddings, norms, head) frozen. Each branch trains to the same cap. With $K_0$ the held-out KL
at step 0, $K_T$ the full run's final KL and $K$ a branch's final KL, the branch reaches

$$
f = \frac{K_0 - K}{K_0 - K_T}
$$

of the full run's KL improvement. If the routing settles early (C12's E-step before M-step),
freezing it at a moderate $t$ costs little ($f_\text{routing}(t) \approx 1$) while freezing the
rest at the same $t$ costs much ($f_\text{rest}(t) \ll 1$): the values must keep training after
the routing has settled, not the reverse. `sufficient_freeze_step` gives, per part, the
earliest tested $t$ from which freezing that part still reaches a level (90%) of the
improvement: the time to 90% of the KL improvement attributable to that part, in steps for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import Any

from implicit_em.windtunnel.checkpoint import load_plain
from implicit_em.windtunnel.config import RunConfig
from implicit_em.windtunnel.run_dirs import run_dir
from implicit_em.windtunnel.timescales import remaining_distance, settling_step
from implicit_em.windtunnel.train import SNAPSHOTS, run, state_path

__all__ = ["kl_fraction", "run_interventions", "sufficient_freeze_step"]

FROZEN_PARTS = ("routing", "rest")


def kl_fraction(kl_initial: float, kl_full: float, kl: float) -> float:
    """$f = (K_0 - K) / (K_0 - K_T)$: the share of the full run's KL improvement reached."""
    gain = kl_initial - kl_full
    if gain <= 0:
        raise ValueError(f"the full run did not improve the KL ({kl_initial} -> {kl_full})")
    return (kl_initial - kl) / gain


def sufficient_freeze_step(
    freeze_at: Sequence[int], fractions: Sequence[float], level: float = 0.9
) -> int | None:
    """The earliest tested step from which freezing still reaches `level` at every later one.

    None when even the latest tested step falls short.
    """
    if len(freeze_at) != len(fractions) or not freeze_at:
        raise ValueError("freeze_at and fractions must be non-empty and of the same length")
    found = None
    for t, f in sorted(zip(freeze_at, fractions, strict=True), reverse=True):
        if not f >= level:
            break
        found = t
    return found


def _branch(config: RunConfig, directory: Path, start: Path, device: str) -> tuple[float, float]:
    """Train one intervention from its branch point; its final held-out KL and training time."""
    result = run(config, directory, device=device, progress=False, branch_from=start)
    if result["status"] != "complete":
        raise RuntimeError(
            f"the {config.freeze}-frozen branch from step {config.freeze_at} stopped at step "
            f"{result['steps']}; rerun to resume it"
        )
    return result["kl_bits"], result["wall_time_s"]


def run_interventions(
    base: RunConfig,
    freeze_at: Sequence[int],
    runs_dir: str | Path,
    label: str,
    device: str = "cpu",
    snapshot_every: int | None = None,
    level: float = 0.9,
    pool: Executor | None = None,
) -> dict[str, Any]:
    """The full run and its two interventions at every step of `freeze_at`, as plain JSON.

    Returns `kl_initial`, `kl_full`, `converged` (the full run's plateau rule), for each
    frozen part `kl_<part>_frozen` and `fraction_<part>_frozen` (one per freeze step) and
    `t_<part>` (`sufficient_freeze_step` at `level`), `wall_time_s` (the full run and
    its branches), and, with `snapshot_every`, the full run's `remaining` distances
    (`timescales.remaining_distance`) with their settling steps `t90`. With `pool`
    (`grid.worker_pool`) the branches train in its processes.
    """
    if base.model != "transformer" or not base.split_qkv or base.freeze:
        raise ValueError("run_interventions needs an unfrozen transformer with split_qkv=True")
    if not freeze_at or any(not 0 < t < base.steps for t in freeze_at):
        raise ValueError(f"freeze_at must be steps strictly inside (0, {base.steps})")
    if base.stop_at_plateau:
        raise ValueError("interventions compare runs of the same length: stop_at_plateau=False")
    runs_dir = Path(runs_dir)
    full_dir = run_dir(runs_dir, base, label)
    full = run(
        base,
        full_dir,
        device=device,
        progress=False,
        snapshot_every=snapshot_every,
        states_at=list(freeze_at),
    )
    kl_initial, kl_full = full["history"]["eval_kl"][0], full["kl_bits"]
    out: dict[str, Any] = {
        "freeze_at": list(freeze_at),
        "kl_initial": kl_initial,
        "kl_full": kl_full,
        "converged": full["converged"],
        "steps": full["steps"],
        "level": level,
        "wall_time_s": full["wall_time_s"],
    }
    branches = [replace(base, freeze=part, freeze_at=t) for part in FROZEN_PARTS for t in freeze_at]
    jobs = (
        [run_dir(runs_dir, c, label) for c in branches],
        [state_path(full_dir, c.freeze_at) for c in branches],
    )
    mapper = pool.map if pool is not None else map
    done = list(mapper(_branch, branches, *jobs, [device] * len(branches)))
    kls = [kl for kl, _ in done]
    out["wall_time_s"] += sum(wall for _, wall in done)
    for i, part in enumerate(FROZEN_PARTS):
        part_kls = kls[i * len(freeze_at) : (i + 1) * len(freeze_at)]
        fractions = [kl_fraction(kl_initial, kl_full, k) for k in part_kls]
        out[f"kl_{part}_frozen"] = part_kls
        out[f"fraction_{part}_frozen"] = fractions
        out[f"t_{part}"] = sufficient_freeze_step(freeze_at, fractions, level)
    if snapshot_every is not None:
        snapshots = load_plain(full_dir / SNAPSHOTS)
        remaining = remaining_distance(snapshots)
        out["remaining"] = {"steps": list(snapshots["steps"]), **remaining}
        out["t90"] = {
            part: settling_step(snapshots["steps"], series, 1.0 - level)
            for part, series in remaining.items()
        }
    return out

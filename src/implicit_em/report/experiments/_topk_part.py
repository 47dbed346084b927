r"""E9's top-$k$ part: its units, its readings and its known-answer controls.

The part trains `_topk_transformer.MoETransformer` under each arm of `config["topk"]["arms"]`
on the seeds `config["topk"]["seeds"]` (its own seeds: fresh at full size). A seed
*specialises* when its per-cluster purity is at least `SPECIALIZED` (0.9); the criterion reads
the share of the trained arm's seeds that specialise (exact Clopper–Pearson interval); the
router's identity residual is a gate (it holds by the chain rule), the trained arm's accuracy
the baseline that it does its task.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from implicit_em.report.experiments._experts import one_thread
from implicit_em.report.experiments._topk_transformer import topk_run
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.judging.stats import share_interval
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Table

__all__ = ["SPECIALIZED", "TOPK_CONTROLS", "specialized_flags", "topk_readings", "topk_units"]

SPECIALIZED = 0.9
"""A seed's experts specialise when its per-cluster purity is at least this."""
ARM_LABELS = {
    "trained": "router trained by the loss",
    "frozen": "router frozen at its random start (no gradient reaches the routing)",
    "planted": "router trained, with each cluster's expert planted (+100 on its logit)",
}


def topk_unit(config: dict[str, Any], arm: str, seed: int) -> dict[str, Any]:
    """One run of the top-$k$ transformer (a unit), on one CPU thread."""
    with one_thread():
        return topk_run(config, seed, arm)


def topk_units(config: Mapping[str, Any]) -> list[Unit]:
    """One unit per arm and seed of `config["topk"]`."""
    part = config["topk"]
    return [
        Unit(f"topk-{arm}-seed{seed}", topk_unit, {"config": part, "arm": arm, "seed": seed})
        for arm in part["arms"]
        for seed in part["seeds"]
    ]


def specialized_flags(runs: list[Mapping[str, Any]]) -> list[float]:
    """Per run: 1.0 when its per-cluster purity reaches `SPECIALIZED`, else 0.0."""
    return [float(r["purity"] >= SPECIALIZED) for r in runs]


def _share_cell(flags: list[float]) -> str:
    i = share_interval(int(sum(flags)), len(flags), "clopper-pearson")
    return f"{int(sum(flags))}/{len(flags)} [{i.low:.2f}, {i.high:.2f}]"


def topk_readings(
    config: Mapping[str, Any], results: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, list[float]], Table, str]:
    """The part's numbers, its criterion's samples (`specialized_topk`), its table and a
    note."""
    part = config["topk"]
    numbers: dict[str, Any] = {"seeds_topk": len(part["seeds"])}
    rows = []
    for arm in part["arms"]:
        runs = [results[f"topk-{arm}-seed{s}"] for s in part["seeds"]]
        flags = specialized_flags(runs)
        numbers[f"specialized_seed_share_topk_{arm}"] = float(np.mean(flags))
        for key in ("purity", "matched_purity", "accuracy", "min_share"):
            numbers[f"{key}_topk_{arm}"] = float(np.mean([r[key] for r in runs]))
        numbers[f"accuracy_topk_{arm}_min"] = min(r["accuracy"] for r in runs)
        rows.append(
            (
                ARM_LABELS[arm],
                _share_cell(flags),
                f"{numbers[f'purity_topk_{arm}']:.3f}",
                f"{numbers[f'matched_purity_topk_{arm}']:.3f}",
                f"{numbers[f'accuracy_topk_{arm}']:.3f}",
                f"{numbers[f'min_share_topk_{arm}']:.2f}",
            )
        )
    trained = [results[f"topk-trained-seed{s}"] for s in part["seeds"]]
    numbers["router_residual_topk"] = max(r["router_residual"] for r in trained)
    samples = {"specialized_topk": specialized_flags(trained)}
    table = Table(
        f"A {part['layers']}-layer transformer with a top-{part['top_k']} mixture of "
        f"{part['experts']} experts as its feed-forward layer, on sequences of "
        f"{part['length']} tokens from {part['clusters']} clusters ({len(part['seeds'])} seeds; "
        "held-out tokens)",
        (
            "router",
            "seeds whose experts specialise (purity ≥ 0.9) [95% exact]",
            "per-cluster purity (mean)",
            "matched purity (mean)",
            "token accuracy (mean)",
            "smallest expert load × E (mean)",
        ),
        tuple(rows),
    )
    residual = numbers["router_residual_topk"]
    note = (
        "Top-k transformer: the router's responsibilities read by the tracer from its gradients "
        f"match its softmax to {residual:.1e} (largest residual; "
        + ("no router found" if math.isinf(residual) else "the softmax Jacobian identity")
        + f"); its experts specialise in {int(sum(samples['specialized_topk']))} of "
        f"{len(trained)} seeds."
    )
    return numbers, samples, table, note


@functools.lru_cache(maxsize=64)
def _cached_run(key: str, arm: str, seed: int) -> dict[str, Any]:
    return topk_unit(json.loads(key), arm, seed)


def _specialized(arm: str) -> Callable[[dict[str, Any]], list[float]]:
    """A control: per control seed, whether the experts of `arm`'s run specialise."""

    def measure(config: dict[str, Any]) -> list[float]:
        part = config["topk"]
        key = json.dumps(part, sort_keys=True)
        return specialized_flags([_cached_run(key, arm, s) for s in part["seeds"]])

    return measure


TOPK_CONTROLS = {
    "specialized_topk": Controls(
        positive=Control(
            "the same transformer and training with the specialisation planted: 100 added to "
            "the router logit of expert c mod E for every token of cluster c",
            _specialized("planted"),
        ),
        negative=Control(
            "realistic: the same transformer, data and training with the router frozen at its "
            "random start and its input detached (routing by fixed random hyperplanes; no "
            "gradient reaches the routing)",
            _specialized("frozen"),
        ),
    )
}

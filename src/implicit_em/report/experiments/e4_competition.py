r"""E4: competition and robustness, normalized against unnormalized objectives (C4, C7).

Learnable prototypes $\mu_j$ take full-batch Adam steps on one of these objectives over the
rows $x_t$, every scale set against the cluster separation $\Delta$ (the smallest distance
between true centres):

* the Gaussian mixture NLL $-\log\sum_j e^{-\lVert x_t-\mu_j\rVert^2/(2s^2)}$, $s = f\Delta$
  (normalized: responsibilities, competition);
* two normalized heavy-tailed rivals with the scale $s$ (`_heavy_tailed`): a Student-t mixture
  and a Gaussian mixture with a uniform background component.

Two measurements, each per data set and seed:

* **gain from one cluster**: every prototype starts on rows of one cluster
  (`_competition.one_cluster_start`); the share of the other clusters covered at the end that
  were not covered at the start (`_competition.coverage`; covered = a prototype within
  $\Delta/2$ of the true centre). Competition spreads prototypes that start together. It is
  undefined on a seed whose start already covers every cluster (`_clusters.gain_share`): the
  samples keep it, so a criterion that reads it is undecided, and the notes count such seeds.
* **outlier pull**: from the same $K$ random rows, the prototypes trained on the clean rows and
  on the rows plus far outliers (a ring at a multiple of $\Delta$ around the data's centre),
  matched one to one; the mean distance between matched prototypes, in units of $\Delta$.

The rivals separate the two ways correntropy differs from the mixture NLL: no normalization
(no competition) and bounded tails (robustness). Correntropy itself,
$\sum_j 1 - e^{-\lVert x_t-\mu_j\rVert^2/(2\sigma^2)}$ (no partition function), is read against
the mixture NLL at the same kernel width over a map of widths and outlier shares
(`_kernel_sweep`), only in the cells where both fit the inliers (C7).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em.report.experiments import _kernel_sweep as ks
from implicit_em.report.experiments._clusters import (
    Clusters,
    Config,
    Variant,
    four_blobs,
    gain_one_cluster,
    outlier_pull,
    variants,
    wine_2d,
    with_outliers,
)
from implicit_em.report.experiments._competition_figure import prototypes_figure
from implicit_em.report.experiments._kernel_map import map_figure, map_tables
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.judging.readings import per_data_set
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table

GROUP_OF = {
    "lse_gain_one_cluster": ("gain", "lse", min),
    "heavy_tailed_gain_one_cluster": ("gain", "heavy_tailed", min),
    "heavy_tailed_outlier_pull": ("pull", "heavy_tailed", max),
}
"""Each criterion's number at one scale: the measurement, the group of objectives it reads, and
how a unit's value is taken over the group (the heavy-tailed rivals: the smaller gain and the
larger pull, so that both rivals must show it)."""

MAP_FLAG_OF = {
    "correntropy_trade_off_share": "both",
    "correntropy_robust_share": "robust",
    "correntropy_no_competition_share": "no_competition",
}
"""The criteria read on the map (`_kernel_sweep`): each the share of a data set's counted cells
where its flag holds, per seed."""


def group_value(number: str, measured: dict[str, float], config: Config) -> float:
    """A unit's value of the criterion `number` from its per-objective measurements."""
    _, group, over = GROUP_OF[number]
    return over(measured[v.name] for v in variants(config)[group])


def measure_gains(
    groups: tuple[str, ...], data: Clusters, seed: int, config: Config, cluster: int | None = None
) -> dict[str, float]:
    return {
        v.name: gain_one_cluster(v, data, seed, config, cluster)
        for g in groups
        for v in variants(config)[g]
    }


def measure_pulls(
    groups: tuple[str, ...], data: Clusters, contaminated: Tensor, seed: int, config: Config
) -> dict[str, dict[str, Any]]:
    return {
        v.name: outlier_pull(v, data, contaminated, seed, config)
        for g in groups
        for v in variants(config)[g]
    }


DATA_SETS = ("blobs", "wine")


def _data(config: Config, name: str, seed: int) -> Clusters:
    """The data set `name` of one seed: four blobs (a fresh draw per seed) or wine."""
    return four_blobs(config["n_blobs"], seed) if name == "blobs" else wine_2d()


def _unit(config: Config, data_name: str, seed: int) -> dict[str, Any]:
    """Every objective's gain from one cluster and outlier pull on one data set and seed."""
    data = _data(config, data_name, seed)
    groups = tuple(variants(config))
    contaminated = with_outliers(data, config["outlier_share"], config["outlier_radius"], seed)
    return {
        "gain": measure_gains(groups, data, seed, config),
        "pull": measure_pulls(groups, data, contaminated, seed, config),
        "map": ks.sweep(data, seed, config),
    }


def undefined_counts(samples: Mapping[str, list[float]]) -> dict[str, int]:
    """Per quantity, how many per-unit values are undefined (NaN): a gain is undefined on a seed
    whose one-cluster start already covers every cluster. The samples keep them, so a criterion
    that reads one is undecided (the registered reading of an undefined value)."""
    return {q: int(np.isnan(np.asarray(vs, dtype=float)).sum()) for q, vs in samples.items()}


def plan(config: Config) -> list[Unit]:
    """One unit per data set and seed: every objective's gain and pull."""
    return [
        Unit(f"{d}-seed{s}", _unit, {"config": dict(config), "data_name": d, "seed": s})
        for d in DATA_SETS
        for s in config["seeds"]
    ]


def aggregate(config: Config, results: Mapping[str, Any], out: Path) -> Outcome:
    data_sets = DATA_SETS
    every = [v for group in variants(config).values() for v in group]
    samples: dict[str, list[float]] = {number: [] for number in GROUP_OF}
    rows: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    first: dict[str, dict[str, Any]] = {}
    jobs = [(d, s) for d in data_sets for s in config["seeds"]]
    for data_name, seed in jobs:
        measured = results[f"{data_name}-seed{seed}"]
        pulls = {name: m["pull"] for name, m in measured["pull"].items()}
        for number, (kind, _, _) in GROUP_OF.items():
            samples[number].append(
                group_value(number, measured["gain"] if kind == "gain" else pulls, config)
            )
        for v in every:
            p = measured["pull"][v.name]
            rows.setdefault((data_name, v.name), []).append(
                (measured["gain"][v.name], p["pull"], p["ari"], p["centre_error"])
            )
        if seed == config["seeds"][0]:
            first[data_name] = measured["pull"]
    maps = {d: [results[f"{d}-seed{s}"]["map"] for s in config["seeds"]] for d in data_sets}
    shares = {d: ks.cell_shares(units, config) for d, units in maps.items()}
    for number, flag in MAP_FLAG_OF.items():
        samples[number] = [v for d in data_sets for v in shares[d][flag]]
    undefined = undefined_counts(samples)
    numbers: dict[str, Any] = {k: float(np.nanmean(v)) for k, v in samples.items()}
    numbers |= {f"undefined_seeds|{k}": n for k, n in undefined.items()}
    for d in data_sets:
        numbers[f"counted_cells|{d}"] = int(ks.valid_cells(maps[d], config, "correntropy").sum())
    for v in every:
        key = v.name
        numbers[f"gain|{key}"] = float(
            np.nanmean([r[0] for d in data_sets for r in rows[(d, key)]])
        )
        numbers[f"pull|{key}"] = float(np.mean([r[1] for d in data_sets for r in rows[(d, key)]]))
    numbers["seeds"] = len(config["seeds"])
    table = Table(
        "Gain from one cluster, outlier pull (in cluster separations Δ), and the clean fit "
        "(mean over seeds)",
        (
            "data",
            "objective",
            "clusters gained from one cluster",
            "outlier pull (Δ)",
            "ARI (clean)",
            "error to true centres (Δ, clean)",
        ),
        tuple(
            (d, name, *np.nanmean(values, axis=0).round(3).tolist())
            for (d, name), values in rows.items()
        ),
    )
    cells = len(config["sweep_widths"]) * len(config["sweep_outlier_shares"])
    notes = [
        f"From every prototype in one cluster, the share of the other clusters gained: mixture "
        f"NLL {numbers['lse_gain_one_cluster']:.2f}; the normalized heavy-tailed rivals at "
        f"least {numbers['heavy_tailed_gain_one_cluster']:.2f}. With "
        f"{config['outlier_share']:.0%} outliers at {config['outlier_radius']:g}Δ from the "
        f"data's centre the rivals' prototypes move by at most "
        f"{numbers['heavy_tailed_outlier_pull']:.3f}Δ.",
        "Correntropy against the mixture NLL over the map (outliers at "
        f"{config['sweep_outlier_radius']:g}Δ): counted cells (both fit the inliers) "
        + ", ".join(f"{d} {numbers[f'counted_cells|{d}']} of {cells}" for d in data_sets)
        + "; mean share of the counted cells where correntropy is more robust "
        f"{numbers['correntropy_robust_share']:.2f}, shows no competition "
        f"{numbers['correntropy_no_competition_share']:.2f}, both "
        f"{numbers['correntropy_trade_off_share']:.2f}. Undefined seeds per criterion (a "
        "one-cluster start that covers every cluster leaves no gain to read; such a criterion "
        "is undecided): "
        + (", ".join(f"{k} {n}" for k, n in undefined.items() if n) or "none")
        + ".",
    ]
    shown = [variants(config)["lse"][0], *variants(config)["heavy_tailed"]]
    figure = prototypes_figure(
        {d: _data(config, d, config["seeds"][0]) for d in data_sets}, first, shown, out
    )
    return Outcome(
        numbers=numbers,
        samples=per_data_set(samples, [d for d, _ in jobs]),
        tables=[table, *map_tables(maps, config)],
        figures=[
            Figure(
                figure,
                "Prototypes after training from the same random rows (first seed): clean "
                "data (filled) and with far outliers (open; the outliers lie outside the "
                "view). Crosses: true centres.",
            ),
            Figure(
                map_figure(maps, config, out),
                "Correntropy against the mixture NLL per kernel width and outlier share: grey "
                "cells are excluded (a model does not fit the inliers); elsewhere which of "
                "'more robust' and 'no competition' holds in most seeds.",
            ),
        ],
        notes=notes,
    )


# Known-answer controls: planted geometries run through the same measurements.


def planted_clusters(outer_rows: int, seed: int) -> Clusters:
    """A start cluster at the origin and three clusters at distance 4 around it (at 90°, 210°
    and 330°; std 0.3, `outer_rows` rows each). The start cluster holds four rows: the origin
    and one row at distance 1.5 facing each outer cluster, so that a prototype started on it
    faces one outer cluster within the reach of every objective's scale. With `outer_rows` = 0
    the outer clusters are empty: nothing pulls a prototype away from the start."""
    rng = np.random.default_rng(seed)
    angles = np.deg2rad([90.0, 210.0, 330.0])
    directions = np.stack([np.cos(angles), np.sin(angles)], 1)
    centres = np.vstack([[0.0, 0.0], 4.0 * directions])
    start = np.vstack([[0.0, 0.0], 1.5 * directions])
    outer = [c + 0.3 * rng.standard_normal((outer_rows, 2)) for c in centres[1:]]
    x = np.vstack([start, *outer])
    labels = np.repeat(np.arange(4), [4, outer_rows, outer_rows, outer_rows])
    return Clusters(
        torch.tensor(x, dtype=torch.float32), labels, torch.tensor(centres, dtype=torch.float32)
    )


def _gain_control(number: str, outer_rows: int) -> Callable[[Config], list[float]]:
    def measure(config: Config) -> list[float]:
        _, group, _ = GROUP_OF[number]
        values = []
        for seed in config["seeds"]:
            data = planted_clusters(outer_rows, seed)
            gains = measure_gains((group,), data, seed, config, cluster=0)
            values.append(group_value(number, gains, config))
        return values

    return measure


def _unnormalized_gain(config: Config) -> list[float]:
    """Per control seed, the gain from one cluster on four blobs of the control size of
    correntropy: the mixture NLL's Gaussian kernel at the same scale, summed over the
    prototypes without the normalisation (same start, steps and rows)."""
    rival = Variant("correntropy", "correntropy", config["bandwidth_fraction"])
    return [
        gain_one_cluster(rival, four_blobs(config["n_blobs"], seed), seed, config)
        for seed in config["seeds"]
    ]


def _pull_control(number: str, outliers: bool) -> Callable[[Config], list[float]]:
    def measure(config: Config) -> list[float]:
        _, group, _ = GROUP_OF[number]
        values = []
        for seed in config["seeds"]:
            data = four_blobs(config["n_blobs"], seed)
            contaminated = with_outliers(data, 3.0, 0.0, seed) if outliers else data.x
            pulls = measure_pulls((group,), data, contaminated, seed, config)
            values.append(group_value(number, {k: m["pull"] for k, m in pulls.items()}, config))
        return values

    return measure


PLANTED_MAP = {
    "sweep_outlier_radius": 5.0,
    "sweep_outlier_shares": [0.05],
    "sweep_widths": [0.1, 0.2],
}
"""The map's planted control: 5% outliers at 5Δ, kernels of at most 0.2Δ."""


@functools.cache
def _control_map(config_json: str, rival: str, planted: bool) -> list[dict[str, Any]]:
    """The map's units per seed of the control configuration (JSON) with `rival` in
    correntropy's place: on four blobs at the control size (`planted` False), or on the planted
    clusters with every prototype started on the centre cluster, 5% outliers at 5Δ and kernels
    of at most 0.2Δ (`planted` True). Cached: the criteria read the same runs."""
    cfg = json.loads(config_json)
    if planted:
        cfg.update(PLANTED_MAP)
        return [
            ks.sweep(planted_clusters(120, s), s, cfg, ("lse", rival), cluster=0)
            for s in cfg["seeds"]
        ]
    return [ks.sweep(four_blobs(cfg["n_blobs"], s), s, cfg, ("lse", rival)) for s in cfg["seeds"]]


def _map_control(number: str, rival: str, planted: bool) -> Callable[[Config], list[float]]:
    """The map criterion `number` read on `_control_map`'s units."""

    def measure(config: Config) -> list[float]:
        units = _control_map(json.dumps(dict(config), sort_keys=True), rival, planted)
        cfg = {**config, **(PLANTED_MAP if planted else {})}
        return ks.cell_shares(units, cfg, rival)[MAP_FLAG_OF[number]]

    return measure


FACING = "each prototype of the start cluster faces its own outer cluster within reach"
EMPTY = "the other clusters hold no rows: nothing to gain"
NEAR = "three times as many outliers as rows, all at the data's centre between the clusters"
NONE = "no outliers: both runs see the same rows"
UNNORMALIZED = (
    "four blobs, every prototype started on one cluster: correntropy, the mixture NLL's kernel "
    "at the same scale without the normalisation, in its place"
)
PLANTED = (
    "start-cluster prototypes each facing an outer cluster, 5% outliers at 5Δ, kernels of at "
    "most 0.2Δ: neither the outliers nor the outer clusters are within correntropy's reach"
)
STUDENT = "a normalized Student-t mixture (ν = 1) in correntropy's place, same widths and rows"
MIXTURE = "the mixture NLL itself in correntropy's place, same widths and rows"


def _controls() -> dict[str, Controls]:
    gains = {
        "lse_gain_one_cluster": Controls(
            positive=Control(FACING, _gain_control("lse_gain_one_cluster", 120)),
            negative=Control(UNNORMALIZED, _unnormalized_gain),
        ),
        "heavy_tailed_gain_one_cluster": Controls(
            positive=Control(FACING, _gain_control("heavy_tailed_gain_one_cluster", 120)),
            negative=Control(EMPTY, _gain_control("heavy_tailed_gain_one_cluster", 0)),
        ),
        "heavy_tailed_outlier_pull": Controls(
            positive=Control(NONE, _pull_control("heavy_tailed_outlier_pull", False)),
            negative=Control(NEAR, _pull_control("heavy_tailed_outlier_pull", True)),
        ),
    }
    rival = {
        "correntropy_trade_off_share": (STUDENT, "student_t"),
        "correntropy_robust_share": (MIXTURE, "lse"),
        "correntropy_no_competition_share": (STUDENT, "student_t"),
    }
    maps = {
        number: Controls(
            positive=Control(PLANTED, _map_control(number, "correntropy", planted=True)),
            negative=Control(says, _map_control(number, family, planted=False)),
        )
        for number, (says, family) in rival.items()
    }
    return {**gains, **maps}


EXPERIMENT = Experiment(
    id="E4",
    title="Competition and robustness: normalized against unnormalized objectives",
    claims=("C4", "C7"),
    data_sets=DATA_SETS,
    hypothesis=(
        "Under the normalized mixture NLL, prototypes started together in one cluster spread "
        "out to the others and are pulled by outliers; under correntropy at the same kernel "
        "width, wherever both fit the inliers, they stay where they started and ignore the "
        "outliers. Normalized heavy-tailed mixtures (Student-t, or a uniform background "
        "component) tell whether the robustness needs the absence of normalization."
    ),
    setup=(
        "Prototypes take full-batch Adam steps on four 2-D blobs (std 0.6, side 5) and wine "
        "(PCA 2-D, cultivar means as centres); every scale is a fraction of the cluster "
        "separation Δ (the smallest distance between true centres). Objectives: the Gaussian "
        "mixture NLL, a Student-t mixture and a Gaussian mixture with a uniform background at one "
        "scale, and correntropy against the mixture NLL at the same kernel width over a map of "
        "widths (0.1Δ to 0.5Δ) and outlier shares (2%, 10%, 30% on a ring at 1.5Δ); a cell "
        "counts only where both fit the inliers (prototypes within 0.25Δ of a true centre on "
        "average, clean rows). Gain: all K "
        "prototypes start on rows of one cluster; a cluster is covered when a prototype lies "
        "within Δ/2 of its centre. Pull: from the same K random rows, trained on the clean rows "
        "and with 5% outliers on a ring at 5Δ from the data's centre, the mean distance between "
        "the two sets of prototypes matched one to one."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=(
        "lse_gain_one_cluster",
        "correntropy_trade_off_share",
        "correntropy_robust_share",
        "correntropy_no_competition_share",
        "heavy_tailed_outlier_pull",
    ),
    meaning={
        "holds": (
            "C4 and C7 as the paper states them: normalization makes prototypes compete and "
            "spread from a shared start at the price of robustness; without it, wherever both "
            "fit the data, each prototype climbs its own density and ignores the outliers."
        ),
        "partly": (
            "Some of the predicted contrasts appear and some do not; the criteria not met say "
            "which of the spreading, the lack of competition or the robustness needs a "
            "qualifier, the map says in which cells of width and outlier share each holds, and "
            "the heavy-tailed rivals say whether robustness needs the absence of normalization."
        ),
        "fails": "None of the predicted contrasts between normalized and unnormalized objectives appears.",
    },
    minutes={"smoke": 0.5, "quick": 1.0, "full": 15.0},
    controls=_controls(),
)

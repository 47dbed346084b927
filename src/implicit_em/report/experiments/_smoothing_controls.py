"""E7's measures over seeds and its known-answer controls: the wrong classes' order kept under smoothing, the accuracy it costs, the comparators' coupling gaps, and planted classes (a chain, a sphere) run through the same training and measurements, with trained one-vs-rest sigmoids as the rival that lacks the shared normalizer."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em.report.experiments._neural import (
    Images,
    spearman_rows,
)
from implicit_em.report.experiments._prototype_training import (
    held_out,
    train_classifier,
    train_comparator,
)
from implicit_em.report.experiments._prototypes import PrototypeClassifier
from implicit_em.report.judging.controls import Control, Controls


def wrong_order_agreement(runs: list[dict[str, Any]], against: list[dict[str, Any]]) -> list[float]:
    """Per seed $i$: the mean per-input Spearman correlation between the wrong classes' order in
    `runs[i]` and in `against[i + 1]` (cyclically): models of different seeds, so that a shared
    initialization cannot make them agree."""
    values = []
    for i, run in enumerate(runs):
        other = against[(i + 1) % len(against)]
        a = torch.tensor(run["wrong_order"], dtype=torch.float64)
        b = torch.tensor(other["wrong_order"], dtype=torch.float64)
        values.append(float(spearman_rows(a, b).nanmean()))
    return values


def wrong_order_kept(smoothed: list[dict[str, Any]], clamp: list[dict[str, Any]]) -> list[float]:
    """Per seed $i$: how much less the smoothed model's wrong-class order agrees with the
    unsmoothed model of seed $i + 1$ than the unsmoothed model of seed $i$ does (0: smoothing
    kept all the order two unsmoothed models share; minus that shared agreement: none kept)."""
    kept = wrong_order_agreement(smoothed, clamp)
    ceiling = wrong_order_agreement(clamp, clamp)
    return [a - b for a, b in zip(kept, ceiling, strict=True)]


def accuracy_cost(clamp: list[dict[str, Any]], smoothed: list[dict[str, Any]]) -> list[float]:
    """Per seed, the test accuracy lost by smoothing."""
    return [a["accuracy"] - b["accuracy"] for a, b in zip(clamp, smoothed, strict=True)]


def learned_gaps(ce: list[float], other: list[float], min_share: float) -> list[float]:
    """Per-seed coupling gaps `ce - other` over the seeds where the comparator learned (finite
    coupling); all NaN (the criterion undecided) unless it learned in at least `min_share` of
    the seeds."""
    pairs = [(a, b) for a, b in zip(ce, other, strict=True) if math.isfinite(b)]
    if len(pairs) < min_share * len(ce):
        return [math.nan] * len(ce)
    return [a - b for a, b in pairs]


COMPARATORS = {
    "ovr_sigmoid": "one-vs-rest sigmoids (proper negatives)",
    "mse": "MSE on one-hot targets (RBF outputs e^(b − d))",
}
"""The unnormalized comparators: each class's loss depends on its own distance alone."""


# Known-answer controls: planted classes run through the same training and measurements.

PLANTED_CLASSES = 6


def planted_chain(config: dict[str, Any]) -> Images:
    """Six classes in 20 dimensions, their centres on a line 3 apart (noise std 0.5):
    `config["planted_train"]` and `config["planted_test"]` inputs, the same for every seed (as
    the experiment's data are). Each input's wrong classes are ordered by their distance along
    the line, the nearest sharing the most."""
    rng = np.random.default_rng(0)

    def draw(n: int) -> tuple[Tensor, Tensor]:
        y = rng.integers(0, PLANTED_CLASSES, n)
        x = 0.5 * rng.standard_normal((n, 20))
        x[:, 0] += 3.0 * (y - (PLANTED_CLASSES - 1) / 2)
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y)

    x_train, y_train = draw(config["planted_train"])
    x_test, y_test = draw(config["planted_test"])
    return Images(
        "planted chain",
        x_train,
        y_train,
        x_test,
        y_test,
        tuple(str(c) for c in range(PLANTED_CLASSES)),
        "planted",
        torch.zeros(1, x_train.shape[1]),
    )


@cache
def _planted(smoothing: float, seed: int, frozen: str) -> dict[str, Any]:
    """One cross-entropy model with label smoothing `smoothing` trained on planted classes as
    the experiment trains it, and measured (`frozen`: the control configuration as JSON)."""
    config = json.loads(frozen)
    return train_classifier(planted_chain(config), smoothing, seed, config)


def _runs(config: dict[str, Any], smoothing: float = 0.0) -> list[dict[str, Any]]:
    """The planted chain models of the control seeds (each trained once per configuration)."""
    frozen = json.dumps({k: v for k, v in config.items() if k != "seeds"}, sort_keys=True)
    return [_planted(smoothing, seed, frozen) for seed in config["seeds"]]


RIVAL_ACCURACY_SLACK = 0.03
"""How far below cross-entropy's test accuracy a trained rival may classify and still count."""


@cache
def _planted_rival(name: str, seed: int, frozen: str) -> dict[str, Any]:
    """The unnormalized head `name` trained on the planted chain as the experiment trains its
    comparators, and measured (`frozen`: the control configuration as JSON)."""
    config = json.loads(frozen)
    return train_comparator(planted_chain(config), name, seed, config)


def working_rival_values(
    rival: list[dict[str, Any]], reference: list[dict[str, Any]], key: str
) -> list[float]:
    """Per seed, the rival's `key`, or NaN (the control undecided) where it classifies more
    than `RIVAL_ACCURACY_SLACK` below the reference model of the same seed: a rival counts
    once it works on the task."""
    return [
        r[key] if r["accuracy"] >= c["accuracy"] - RIVAL_ACCURACY_SLACK else math.nan
        for r, c in zip(rival, reference, strict=True)
    ]


def _rival_competition(config: dict[str, Any]) -> list[float]:
    """Trained one-vs-rest sigmoids on the planted chain: their wrong-class competition, where
    they classify as well as cross-entropy (`working_rival_values`)."""
    frozen = json.dumps({k: v for k, v in config.items() if k != "seeds"}, sort_keys=True)
    rival = [_planted_rival("ovr_sigmoid", seed, frozen) for seed in config["seeds"]]
    return working_rival_values(rival, _runs(config), "competition")


UNIFORM_TARGET = (PLANTED_CLASSES - 1) / PLANTED_CLASSES
"""The label smoothing at which the target is uniform over the classes: it carries no label."""


def _order_kept(shuffle: bool) -> Callable[[dict[str, Any]], list[float]]:
    def measure(config: dict[str, Any]) -> list[float]:
        smoothed = _runs(config)
        if shuffle:
            smoothed = [{"wrong_order": _shuffled_rows(r["wrong_order"])} for r in smoothed]
        return wrong_order_kept(smoothed, _runs(config))

    return measure


def _shuffled_rows(ranks: list[list[int]]) -> list[list[int]]:
    """Each row's ranks permuted at random (a fixed generator): a permutation null."""
    rng = np.random.default_rng(0)
    return [rng.permutation(row).tolist() for row in ranks]


def _cost(smoothing: float) -> Callable[[dict[str, Any]], list[float]]:
    def measure(config: dict[str, Any]) -> list[float]:
        return accuracy_cost(_runs(config), _runs(config, smoothing))

    return measure


SPHERE_DIMENSION = 64
SPHERE_RADIUS = 4.0


def planted_sphere(seed: int, inputs: int) -> tuple[PrototypeClassifier, Images]:
    r"""A planted model whose geometry cannot couple the classes: an exact identity encoder
    ($h = \mathrm{relu}(x) - \mathrm{relu}(-x)$) on `inputs` points drawn
    uniformly on a sphere of radius 4 in 64 dimensions, orthogonal prototypes on the same
    sphere, labels drawn independently of both. An input's projections on the prototypes are
    then nearly independent, so the correct class's distance says almost nothing about the
    wrong classes' geometry, and only a normalized loss ties their update to it."""
    rng = np.random.default_rng(seed)
    f, n = SPHERE_DIMENSION, inputs
    z = rng.standard_normal((n, f))
    x = torch.tensor(SPHERE_RADIUS * z / np.linalg.norm(z, axis=1, keepdims=True))
    basis, _ = np.linalg.qr(rng.standard_normal((f, PLANTED_CLASSES)))
    model = PrototypeClassifier(f, 2 * f, f, PLANTED_CLASSES)
    eye = torch.eye(f)
    with torch.no_grad():
        model.encoder.hidden.weight.copy_(torch.cat([eye, -eye]))
        model.encoder.hidden.bias.zero_()
        model.encoder.out.weight.copy_(torch.cat([eye, -eye], 1))
        model.encoder.out.bias.zero_()
        model.head.prototypes.copy_(torch.tensor(SPHERE_RADIUS * basis.T))
    y = torch.tensor(rng.integers(0, PLANTED_CLASSES, n))
    classes = tuple(str(c) for c in range(PLANTED_CLASSES))
    x = x.float()
    return model, Images(
        "planted sphere", x, y, x, y, classes, "planted", torch.zeros(1, x.shape[1])
    )


@cache
def _sphere_coupling(head: str, seed: int, inputs: int) -> float:
    model, images = planted_sphere(seed, inputs)
    with torch.no_grad():
        bias = model(images.x_test).median()
    return held_out(model, images, head, order_inputs=0, bias=bias)["encoder_coupling"]


def _gap(head: str, against: str) -> Callable[[dict[str, Any]], list[float]]:
    def measure(config: dict[str, Any]) -> list[float]:
        seeds = config["seeds"]
        return learned_gaps(
            [_sphere_coupling(against, s, config["planted_test"]) for s in seeds],
            [_sphere_coupling(head, s, config["planted_test"]) for s in seeds],
            config["comparator_min_learned_share"],
        )

    return measure


def controls() -> dict[str, Controls]:
    chain = "classes on a line: the nearest wrong classes share the most"
    sphere = (
        "identity encoder, inputs and prototypes on a sphere, labels independent of both: "
        "only normalization can tie the wrong classes' update to the correct class's distance"
    )
    controls = {
        "wrong_competition": Controls(
            positive=Control(
                f"{chain}; cross-entropy",
                lambda config: [r["competition"] for r in _runs(config)],
            ),
            negative=Control(
                f"{chain}; trained one-vs-rest sigmoids (no shared normalizer), counted where "
                f"they classify within {RIVAL_ACCURACY_SLACK:g} of cross-entropy",
                _rival_competition,
            ),
        ),
        "wrong_order_kept": Controls(
            positive=Control(
                f"{chain}; no smoothing on the smoothed side: nothing to erase",
                _order_kept(shuffle=False),
            ),
            negative=Control(
                f"{chain}; the wrong-class order shuffled per input (a permutation null)",
                _order_kept(shuffle=True),
            ),
        ),
        "accuracy_cost": Controls(
            positive=Control(f"{chain}; no smoothing on either side: nothing to pay", _cost(0.0)),
            negative=Control(
                "smoothing (K - 1)/K: the target is uniform and carries no label",
                _cost(UNIFORM_TARGET),
            ),
        ),
    }
    for name in COMPARATORS:
        other = next(n for n in COMPARATORS if n != name)
        controls[f"encoder_coupling_gap_{name}"] = Controls(
            positive=Control(f"{sphere}; cross-entropy against {name}", _gap(name, "ce")),
            negative=Control(
                f"{sphere}; {other} against {name} (no normalization on either side)",
                _gap(name, other),
            ),
        )
    return controls

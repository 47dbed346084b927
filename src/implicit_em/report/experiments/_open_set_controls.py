r"""E8's known-answer controls, run through the experiment's own measurement code
(`_open_set_measures.measure_model`) at the protocol's `control` size.

* The closed-world share and r₀'s AUROC: planted unknowns (the known test inputs scaled by 4),
  and the same with the roles swapped or with inputs trained under every label.
* The gain of a null's r₀ over the softmax head's best of energy, Mahalanobis and KNN (C14c):
  the positive is a null d₀(x) trained with the test's own unknowns as its outliers (the
  unknown classes' training images, or the known training images under the registered
  corruptions): a null shown the answer must beat the rivals. The negative is realistic: the
  constant-d₀ null head, whose r₀ ranks inputs as its own energy, through the same comparison:
  it lacks exactly the input dependence (and the exposure).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np
import torch

from implicit_em.report.experiments._neural import Images, load_images
from implicit_em.report.experiments._open_set_corruptions import corrupt, with_corruptions
from implicit_em.report.experiments._open_set_measures import (
    closed_world_share_softmax,
    gain_over_rivals,
    measure_model,
    null_auroc,
)
from implicit_em.report.experiments._open_set_splits import (
    OpenSetSplit,
    digits_as_images,
    random_split,
)
from implicit_em.report.judging.controls import Control, Controls

__all__ = ["CONTROLS"]


def _split_with_unknowns(
    split: OpenSetSplit, near: torch.Tensor, far: torch.Tensor
) -> OpenSetSplit:
    """`split` with its unknown test inputs replaced by `near` and its far set by `far`."""
    known = split.y_test >= 0
    return replace(
        split,
        x_test=torch.cat([split.x_test[known], near]),
        y_test=torch.cat([split.y_test[known], split.y_test.new_full((len(near),), -1)]),
        x_far=far,
    )


@cache
def _control_images(data: str, n_train: int, device: str) -> tuple[Images, torch.Tensor]:
    """The controls' images and far set, loaded once per process."""
    images = load_images({"data": data, "n_train": n_train, "device": device})
    return images, digits_as_images(images.mean)


def _control_splits(config: dict[str, Any]) -> list[tuple[int, OpenSetSplit]]:
    images, x_far = _control_images(config["data"], config["n_train"], config.get("device", "cpu"))
    return [
        (
            seed,
            with_corruptions(
                random_split(images, x_far, seed, config),
                images.mean,
                config["corruptions"],
                seed,
                config.get("n_corrupt"),
            ),
        )
        for seed in config["seeds"]
    ]


def _scaled(split: OpenSetSplit, factor: float) -> OpenSetSplit:
    """Unknowns are the known test inputs scaled by `factor`: far out along the known classes."""
    known = split.x_test[split.y_test >= 0]
    return _split_with_unknowns(split, factor * known, factor * known)


def _swapped(split: OpenSetSplit, factor: float) -> OpenSetSplit:
    """`_scaled` with the roles swapped: the known test inputs are scaled by `factor` and the
    unknowns (near and far) are the unscaled known test inputs."""
    known = split.y_test >= 0
    originals = split.x_test[known]
    planted = replace(split, x_test=factor * originals, y_test=split.y_test[known])
    return _split_with_unknowns(planted, originals, originals)


def _ambiguous(split: OpenSetSplit, rows: int = 200) -> OpenSetSplit:
    """Unknowns are `rows` held-out training inputs that the training set now holds once under
    every known label: the cross-entropy optimum on them is the uniform distribution."""
    x, y = split.x_train[rows:], split.y_train[rows:]
    ambiguous = split.x_train[:rows]
    labels = torch.arange(split.classes, device=y.device).repeat_interleave(rows)
    planted = replace(
        split,
        x_train=torch.cat([x, ambiguous.repeat(split.classes, 1)]),
        y_train=torch.cat([y, labels]),
    )
    return _split_with_unknowns(planted, ambiguous, ambiguous)


def _measure(
    config: dict[str, Any],
    plant: Callable[[OpenSetSplit], OpenSetSplit],
    models: tuple[str, ...],
    read: Callable[[dict[str, dict[str, Any]]], float],
) -> list[float]:
    settings = {**config, "models": list(models)}
    return [
        read({k: measure_model(k, plant(split), seed, settings) for k in models})
        for seed, split in _control_splits(config)
    ]


def _null_controls(where: str) -> Controls:
    """The controls of r₀'s AUROC on the `near` or `far` test set: its unknowns planted."""
    unknowns = "unknowns" if where == "near" else "the far set"

    def read(m: dict[str, dict[str, Any]]) -> float:
        return null_auroc(m, where)

    return Controls(
        positive=Control(
            f"{unknowns}: the known test inputs scaled by 4 (far from every prototype)",
            lambda c: _measure(c, lambda s: _scaled(s, 4.0), ("null",), read),
        ),
        negative=Control(
            f"the positive's roles swapped: known test inputs scaled by 4, {unknowns} unscaled "
            "known test inputs",
            lambda c: _measure(c, lambda s: _swapped(s, 4.0), ("null",), read),
        ),
    )


def _exposed_to_unknowns(
    config: dict[str, Any], where: str
) -> Callable[[OpenSetSplit, int], OpenSetSplit]:
    """The plant of a gain's positive control: the split's outliers (for outlier exposure)
    replaced by the `where` set's own kind of unknown: the unknown classes' training images
    (`near`), or the known training images under the registered corruptions, drawn with the
    seed + 1 (`corrupt`)."""
    images, _ = _control_images(config["data"], config["n_train"], config.get("device", "cpu"))

    def plant(split: OpenSetSplit, seed: int) -> OpenSetSplit:
        if where == "near":
            rows = np.flatnonzero(np.isin(images.y_train.cpu().numpy(), split.unknown))
            outliers = images.x_train[torch.from_numpy(rows).to(images.x_train.device)]
        else:
            outliers = corrupt(split.x_train, images.mean, config["corruptions"], seed + 1)
        return replace(split, x_outlier=outliers)

    return plant


@cache
def _gain_runs(config_json: str, plant: str) -> list[dict[str, dict[str, Any]]]:
    """Per control seed, the softmax head and one null head measured on a split: the
    constant null on the split as drawn (`plant` "none"), or the exposed null d₀(x) with the
    unknowns of `plant` ("near", "corrupt") as its outliers. Cached: the controls of the four
    gains share three runs."""
    config = json.loads(config_json)
    candidate = "null" if plant == "none" else "null_oe"
    change = (lambda s, _: s) if plant == "none" else _exposed_to_unknowns(config, plant)
    models = ("softmax", candidate)
    settings = {**config, "models": list(models)}
    runs = []
    for seed, split in _control_splits(config):
        planted = change(split, seed)
        runs.append({k: measure_model(k, planted, seed, settings) for k in models})
    return runs


def _gain_controls(where: str) -> Controls:
    """The controls of a null's gain over the softmax head's rivals on the `where` set."""
    unknowns = {
        "near": "the unknown classes' training images",
        "corrupt": "corrupted known training images",
    }[where]

    def runs(config: dict[str, Any], plant: str) -> list[dict[str, dict[str, Any]]]:
        return _gain_runs(json.dumps(dict(config), sort_keys=True), plant)

    return Controls(
        positive=Control(
            f"the null d₀(x) trained with {unknowns} as its outliers (shown the test's own "
            "kind of unknown)",
            lambda c: [gain_over_rivals(m, "null_oe", where) for m in runs(c, where)],
        ),
        negative=Control(
            "the constant-d₀ null head (r₀ ranks inputs as its own energy) in the null's place",
            lambda c: [gain_over_rivals(m, "null", where) for m in runs(c, "none")],
        ),
    )


CONTROLS = {
    "closed_world_share_softmax": Controls(
        positive=Control(
            "unknowns are the known test inputs scaled by 4 (far out along the known classes)",
            lambda c: _measure(
                c, lambda s: _scaled(s, 4.0), ("softmax",), closed_world_share_softmax
            ),
        ),
        negative=Control(
            "unknowns are inputs trained once under every known label (the optimum is uniform)",
            lambda c: _measure(c, _ambiguous, ("softmax",), closed_world_share_softmax),
        ),
    ),
    "null_auroc": _null_controls("near"),
    "null_auroc_far": _null_controls("far"),
    **{
        f"{null}_gain_over_rivals_{where}": _gain_controls(where)
        for null in ("null_x", "null_oe")
        for where in ("near", "corrupt")
    },
}

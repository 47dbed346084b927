r"""E8's known-answer controls, run through the experiment's own measurement code
(`_open_set_measures.measure_model`) at the protocol's `control` size.

C14c's criteria read the gain of a null's r₀ over the softmax head's strongest field detector
on the unknown classes (`_open_set_measures.gain_over_field`). The positive control is a null
d₀(x) trained with the unknown classes' own training images as its outliers: a null shown the
answer must beat the field. The negative is realistic: the same prototype head trained with the
same soft-target mass as label smoothing and no null component, its 1 − max responsibility
(MSP) read in r₀'s place through the same comparison: it lacks exactly the "none of the above"
component.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np
import torch

from implicit_em.report.experiments._neural import Images, load_images
from implicit_em.report.experiments._open_set import NULLS
from implicit_em.report.experiments._open_set_corruptions import with_corruptions
from implicit_em.report.experiments._open_set_measures import gain_over_field, measure_model
from implicit_em.report.experiments._open_set_splits import (
    OpenSetSplit,
    digits_as_images,
    random_split,
)
from implicit_em.report.judging.controls import Control, Controls

__all__ = ["CONTROLS"]


@cache
def _control_images(data: str, n_train: int, device: str) -> tuple[Images, torch.Tensor]:
    """The controls' images and far set, loaded once per process."""
    images = load_images({"data": data, "n_train": n_train, "device": device})
    return images, digits_as_images(images.mean)


def _control_split(config: dict[str, Any], seed: int, plant: str) -> OpenSetSplit:
    """Seed `seed`'s split at the control size: as drawn (`plant` "none"), or with its outliers
    (for outlier exposure) replaced by the unknown classes' own training images (`plant`
    "unknowns")."""
    images, x_far = _control_images(config["data"], config["n_train"], config.get("device", "cpu"))
    split = with_corruptions(
        random_split(images, x_far, seed, config),
        images.mean,
        config["corruptions"],
        seed,
        config.get("n_corrupt"),
    )
    if plant == "none":
        return split
    if plant != "unknowns":
        raise ValueError(f"plant must be 'none' or 'unknowns', got {plant!r}")
    rows = np.flatnonzero(np.isin(images.y_train.cpu().numpy(), split.unknown))
    index = torch.from_numpy(rows).to(images.x_train.device)
    return replace(split, x_outlier=images.x_train[index])


@cache
def _measured(config_json: str, kind: str, plant: str, seed: int) -> dict[str, Any]:
    """`measure_model` of model `kind` on seed `seed`'s control split under `plant`; computed
    once per process (the softmax head, which sees no outliers, is shared by every control)."""
    config = json.loads(config_json)
    settings = {**config, "models": [kind]}
    return measure_model(kind, _control_split(config, seed, plant), seed, settings)


def _gains(config: dict[str, Any], candidate: str, plant: str, score: str) -> list[float]:
    """Per control seed, `gain_over_field` of `candidate`'s `score` trained under `plant`."""
    key = json.dumps(dict(config), sort_keys=True)
    return [
        gain_over_field(
            {
                "softmax": _measured(key, "softmax", "none", seed),
                candidate: _measured(key, candidate, plant, seed),
            },
            candidate,
            "near",
            score,
        )
        for seed in config["seeds"]
    ]


FIELD_CONTROLS = Controls(
    positive=Control(
        "the null d₀(x) trained with the unknown classes' training images as its outliers "
        "(shown the test's own kind of unknown)",
        lambda c: _gains(c, "null_oe", "unknowns", "null"),
    ),
    negative=Control(
        "the same prototype head trained with the same soft-target mass as label "
        "smoothing and no null component, its 1 − max responsibility (MSP) in r₀'s place",
        lambda c: _gains(c, "smoothing", "none", "msp"),
    ),
)

CONTROLS = {f"{null}_gain_over_field_near": FIELD_CONTROLS for null in NULLS}

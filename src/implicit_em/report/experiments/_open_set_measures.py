"""E8's measurements: one model trained on a seed's split and every detector's metrics on the near, far and validation sets, and the per-seed numbers its criteria read from them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from implicit_em.report.experiments._experts import one_thread
from implicit_em.report.experiments._open_set import (
    CONFIDENT,
    Scorer,
    train_model,
)
from implicit_em.report.experiments._open_set_scores import (
    chosen_on_validation,
    open_set_metrics,
)
from implicit_em.report.experiments._open_set_splits import (
    OpenSetSplit,
)


@one_thread()
def measure_model(
    kind: str, split: OpenSetSplit, seed: int, config: dict[str, Any], keep: bool = False
) -> dict[str, Any]:
    """Train one model on `split` and measure it: every detector's metrics on the near, the
    corrupted and the far test set and its validation AUROC, the closed-world shares, the
    closed-set accuracy and (constant null) the null check; `keep` also returns the scores
    (for the figure). Torch runs on one thread inside (the models are small: more threads
    only add synchronization, and oversubscribe a busy machine)."""
    model = train_model(
        kind, split.x_train, split.y_train, split.classes, seed, config, split.x_outlier
    )
    scorer = Scorer(model, split.x_train, split.y_train, config)
    unknown = split.test_unknown
    near = scorer.scores(split.x_test)
    far = scorer.scores(split.x_far)
    others = {"far": far}
    if split.x_corrupt is not None:
        others["corrupt"] = scorer.scores(split.x_corrupt)
    val = scorer.scores(split.x_val)
    known = torch.from_numpy(~unknown).to(split.y_test.device)
    result: dict[str, Any] = {
        "near": {n: open_set_metrics(v, unknown) for n, v in near.items()},
        **{
            where: {n: _against_known(near[n][~unknown], scores[n]) for n in near}
            for where, scores in others.items()
        },
        "val": {n: open_set_metrics(v, split.val_unknown)["auroc"] for n, v in val.items()},
        "share": float((scorer.confidence(split.x_test)[unknown] > CONFIDENT).mean()),
        "share_far": float((scorer.confidence(split.x_far) > CONFIDENT).mean()),
        "accuracy": float(
            (scorer.predicted(split.x_test)[known] == split.y_test[known]).double().mean()
        ),
    }
    if kind == "null":
        result["null_check"] = scorer.null_check(split.x_test)
    if keep:
        result["scores"] = {"near": near, **others}
    return result


def _against_known(known: np.ndarray, unknown: np.ndarray) -> dict[str, float]:
    """`open_set_metrics` of a score on known test inputs against another set's inputs."""
    positive = np.concatenate([np.zeros(len(known), bool), np.ones(len(unknown), bool)])
    return open_set_metrics(np.concatenate([known, unknown]), positive)


def closed_world_share_softmax(seed: dict[str, dict[str, Any]]) -> float:
    """One seed's share of unknown test inputs the softmax head gives a known class with
    confidence above `CONFIDENT`."""
    return seed["softmax"]["share"]


def null_auroc(seed: dict[str, dict[str, Any]], where: str = "near") -> float:
    """One seed's AUROC of the constant null's $r_0$ on the `near` or `far` test set."""
    return seed["null"][where]["null"]["auroc"]


def gain_over_chosen(
    seed: dict[str, dict[str, Any]],
    candidate: str,
    pool: tuple[str, ...],
    where: str,
    detectors: tuple[str, ...] | None = None,
    score: str = "null",
) -> tuple[float, str]:
    """The AUROC of `candidate`'s `score` (its $r_0$ by default) on the `where` test set minus
    that of the baseline of the models `pool` (and their `detectors`, every one when None) with
    the best validation AUROC, and its name."""
    validation = {
        f"{k}/{n}": seed[k]["val"][n]
        for k in pool
        for n in seed[k]["val"]
        if detectors is None or n in detectors
    }
    chosen = chosen_on_validation(validation)
    kind, name = chosen.split("/")
    return seed[candidate][where][score]["auroc"] - seed[kind][where][name]["auroc"], chosen


FIELD = ("msp", "energy", "max_logit", "mahalanobis", "knn", "vim", "react")
"""The field's detectors on the plain softmax head (OpenOOD's post-hoc methods on one
backbone): the rivals a "none of the above" component must beat (C14c)."""


def gain_over_field(
    seed: dict[str, dict[str, Any]], candidate: str, where: str, score: str = "null"
) -> float:
    r"""One seed's AUROC of `candidate`'s `score` (its $r_0$) on the `where` set minus that of
    the strongest field rival: the softmax head's detector of `FIELD` with the best AUROC on
    the same set (the hardest rival, as OpenOOD ranks methods on the test set; with thousands
    of test inputs each AUROC's sampling spread is a few thousandths, so the best of seven
    is not materially inflated)."""
    best = max(seed["softmax"][where][n]["auroc"] for n in FIELD if n in seed["softmax"][where])
    return seed[candidate][where][score]["auroc"] - best


def gain_over_field_chosen(
    seed: dict[str, dict[str, Any]], candidate: str, where: str, score: str = "null"
) -> float:
    """`gain_over_field` against the field detector with the best AUROC on the validation
    split instead (chosen per seed, never on the test inputs; shown beside the criterion: with
    a few hundred validation images the choice is noisy)."""
    return gain_over_chosen(seed, candidate, ("softmax",), where, FIELD, score)[0]

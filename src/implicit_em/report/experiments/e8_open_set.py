r"""E8 (C10, C14c): softmax is closed-world; a "none of the above" component, and its rivals.

Per seed, a randomized split of the classes (`_open_set_splits`): known classes to train on,
outlier classes held out (for outlier exposure and for validation), and unknown test classes
(near out-of-distribution); the known test images under registered corruptions
(`_open_set_corruptions`) are a second near set, and a second data set is the far set. Eight
classifiers share an MLP encoder and are trained on the known classes (`_open_set.MODELS`):
linear softmax and one-vs-rest sigmoid heads, a prototype (distance) head, the prototype head
with a null component (constant $d_0$, an input-dependent $d_0(x)$, or $d_0(x)$ trained with
the outlier classes' images toward the null), the softmax head with outlier exposure, and the
label-smoothing ablation.

Detectors, scores for "unknown" (`_open_set_scores`): MSP, energy, max logit, Mahalanobis,
KNN, ViM (linear heads), ReAct + energy, and for the null heads the null responsibility $r_0$.

* C10 (closed world): the share of unknown test inputs a head gives to a known class with
  confidence above 0.9, for the softmax head and, beside it, for the unnormalized sigmoid head.
* C14c (none of the above), judged on the unseen classes: per seed and per null (the constant
  $d_0$, the paper's "threshold below which no component takes responsibility"; the
  input-dependent $d_0(x)$; $d_0(x)$ trained on outliers), $r_0$'s AUROC minus that of the
  strongest field rival, the plain softmax head's detector of `FIELD` (MSP, energy, max logit,
  Mahalanobis, KNN, ViM, ReAct: OpenOOD's post-hoc methods on one backbone) with the best
  AUROC on the same test set. Beside it, not judged: the same gains on the corrupted known
  images and on the digits, against the field detector chosen per seed on the *validation*
  split (known images held out from training against outlier-class images), against the
  baseline chosen from every head and detector, against label smoothing and outlier
  exposure's MSP; $r_0$'s AUROC itself (the rule of 2026-12-03) and the closed-world shares
  (C10 is judged by E18).

With a constant $d_0$, $r_0 = \sigma(-d_0 - L)$ with $L = \log\sum_j e^{-d_j}$: a strictly
increasing function of the energy score $-L$ of the same model (a gate checks it; `verify`'s
`null_orders_as_energy` proves it): the constant null is a threshold on its own head's energy,
trained with the null's soft target. The criteria's realistic negative control is the same
prototype head trained with the same soft-target mass as label smoothing and no null component
(`smoothing`), its $1 - \max_j r_j$ (MSP) read in $r_0$'s place: the same comparison without the
"none of the above" component.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from implicit_em.report.experiments._cells import interval_cell
from implicit_em.report.experiments._neural import (
    images_of,
    mean_std,
    plus_minus,
)
from implicit_em.report.experiments._open_set import (
    CONFIDENT,
    MODELS,
    NULLS,
    SCORES,
)
from implicit_em.report.experiments._open_set_controls import CONTROLS
from implicit_em.report.experiments._open_set_corruptions import with_corruptions
from implicit_em.report.experiments._open_set_measures import (
    FIELD,
    closed_world_share_softmax,
    gain_over_chosen,
    gain_over_field,
    gain_over_field_chosen,
    measure_model,
    null_auroc,
)
from implicit_em.report.experiments._open_set_splits import (
    OpenSetSplit,
    digits_as_images,
    random_split,
)
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table

BASELINE_MODELS = ("softmax", "sigmoid", "distance")
"""The heads without a null component whose detectors form the baseline pool."""
SETS = {
    "near": "unknown classes (near)",
    "corrupt": "known classes, corrupted (near)",
    "far": "digits (far)",
}
JUDGED = "near"
"""The test set C14c is judged on: unseen classes of the same data set (the corrupted known
images and the digits are shown beside it)."""


def _split(config: dict[str, Any], seed: int) -> OpenSetSplit:
    """One seed's split of the configuration's images, with the digits as the far set and the
    known test images under the registered corruptions as the corrupted set."""
    images = images_of(config)
    split = random_split(images, digits_as_images(images.mean), seed, config)
    return with_corruptions(
        split, images.mean, config["corruptions"], seed, config.get("n_corrupt")
    )


def _model_unit(config: dict[str, Any], kind: str, seed: int, keep: bool) -> dict[str, Any]:
    """`measure_model` of one model on one seed's split."""
    return measure_model(kind, _split(config, seed), seed, config, keep)


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per model and seed (the first seed's keep their scores, for the figure)."""
    first, gpu = config["seeds"][0], config.get("device", "cpu") != "cpu"
    return [
        Unit(
            f"{kind}-seed{seed}",
            _model_unit,
            {"config": config, "kind": kind, "seed": seed, "keep": seed == first},
            gpu=gpu,
        )
        for seed in config["seeds"]
        for kind in config["models"]
    ]


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    images = images_of(config)
    seeds = config["seeds"]
    splits = [_split(config, seed) for seed in seeds]
    measured = [{k: results[f"{k}-seed{seed}"] for k in config["models"]} for seed in seeds]

    numbers: dict[str, Any] = {
        "data": images.name,
        "far_data": "digits (scikit-learn, 8 x 8 drawn as 28 x 28)",
        "splits": [
            {
                "known": [images.classes[c] for c in s.known],
                "outlier": [images.classes[c] for c in s.outlier],
                "unknown": [images.classes[c] for c in s.unknown],
            }
            for s in splits
        ],
        "seeds": len(seeds),
        "steps": config["steps"],
        "null_target": config["null_target"],
    }
    rows = []
    for where in SETS:
        for kind in MODELS:
            for name in measured[0][kind][where]:
                cells = []
                for metric in ("auroc", "aupr_in", "aupr_out", "fpr95"):
                    series = [m[kind][where][name][metric] for m in measured]
                    key = f"{metric}_{where}_{kind}_{name}"
                    numbers[key], numbers[f"{key}_std"] = mean_std(series)
                    cells.append(interval_cell(series))
                rows.append((SETS[where], MODELS[kind], SCORES[name], *cells))
    model_rows = []
    for kind in MODELS:
        for key in ("accuracy", "share", "share_far"):
            series = [m[kind][key] for m in measured]
            numbers[f"{key}_{kind}"], numbers[f"{key}_{kind}_std"] = mean_std(series)
        model_rows.append(
            (
                MODELS[kind],
                plus_minus([m[kind]["accuracy"] for m in measured]),
                interval_cell([m[kind]["share"] for m in measured]),
                interval_cell([m[kind]["share_far"] for m in measured]),
            )
        )
    checks = [m["null"]["null_check"] for m in measured]
    numbers["null_closed_form_error"] = max(c["closed_form_error"] for c in checks)
    numbers["null_rank_violations"] = sum(c["rank_violations"] for c in checks)
    numbers["null_d0"] = float(np.mean([c["d0"] for c in checks]))
    gain_rows = _gains(measured, numbers)
    samples = {
        **{
            f"{null}_gain_over_field_{JUDGED}": [gain_over_field(m, null, JUDGED) for m in measured]
            for null in NULLS
        },
    }
    numbers["closed_world_share_softmax"] = float(
        np.mean([closed_world_share_softmax(m) for m in measured])
    )
    numbers["null_auroc"] = float(np.mean([null_auroc(m) for m in measured]))
    numbers["null_auroc_far"] = float(np.mean([null_auroc(m, "far") for m in measured]))
    for key, values in samples.items():
        numbers[key] = float(np.mean(values))
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                f"Closed-set accuracy and the closed-world share: unknown inputs given to a known "
                f"class with confidence > {CONFIDENT} ({images.name}, {len(seeds)} randomized "
                "splits; mean and 95% interval)",
                ("model", "closed-set accuracy", "share, unknown classes", "share, digits"),
                tuple(model_rows),
            ),
            Table(
                "r₀ (AUROC) against rivals, paired by seed: the softmax head's strongest field "
                "detector on the same test set (C14c's criteria read it on the unknown classes), "
                "the field detector chosen on the validation split, the "
                "baseline chosen on validation (softmax, sigmoid or distance head, any detector), "
                "the label-smoothing ablation (its detector chosen on validation), and outlier "
                "exposure's MSP (mean and 95% interval)",
                ("null", "rival", *(f"gain, {label}" for label in SETS.values())),
                tuple(gain_rows),
            ),
            Table(
                f"Detecting unknown inputs (unknown = positive; {len(seeds)} seeds, mean and 95% "
                "interval)",
                ("test set", "model", "score", "AUROC", "AUPR-in", "AUPR-out", "FPR at 95% TPR"),
                tuple(rows),
            ),
        ],
        figures=[_figure(measured[0], splits[0], out)],
        notes=_notes(numbers),
    )


def _gains(measured: list[dict[str, dict[str, Any]]], numbers: dict[str, Any]) -> list[tuple]:
    """The rival comparisons of both null heads (fills `numbers`); the table's rows."""
    rows = []
    for candidate in NULLS:
        rivals: dict[str, Callable[[dict[str, Any], str], float]] = {
            "field": lambda m, w, c=candidate: gain_over_field(m, c, w),
            "field_chosen": lambda m, w, c=candidate: gain_over_field_chosen(m, c, w),
            "best": lambda m, w, c=candidate: gain_over_chosen(m, c, BASELINE_MODELS, w)[0],
            "smoothing": lambda m, w, c=candidate: gain_over_chosen(m, c, ("smoothing",), w)[0],
            "oe": lambda m, w, c=candidate: m[c][w]["null"]["auroc"] - m["oe"][w]["msp"]["auroc"],
        }
        for rival, gain in rivals.items():
            cells = []
            for where in SETS:
                series = [gain(m, where) for m in measured]
                key = f"{candidate}_gain_over_{rival}_{where}"
                numbers[key], numbers[f"{key}_std"] = mean_std(series)
                cells.append(interval_cell(series))
            label = {
                "field": "strongest field detector of the softmax head on the test set",
                "field_chosen": "field detector of the softmax head chosen on validation",
                "best": "baseline chosen on validation",
                "smoothing": "label-smoothing ablation",
                "oe": "outlier exposure (MSP)",
            }[rival]
            rows.append((MODELS[candidate], label, *cells))
    numbers["chosen_baseline_per_seed"] = [
        gain_over_chosen(m, "null", BASELINE_MODELS, "near")[1] for m in measured
    ]
    numbers["chosen_rival_per_seed"] = [
        gain_over_chosen(m, "null", ("softmax",), JUDGED, FIELD)[1] for m in measured
    ]
    numbers["strongest_rival_per_seed"] = [
        max(FIELD, key=lambda n, m=m: m["softmax"][JUDGED][n]["auroc"]) for m in measured
    ]
    return rows


def _notes(n: dict[str, Any]) -> list[str]:
    return [
        "Splits (known | outlier-exposure and validation | unknown test classes): "
        + "; ".join(
            f"{', '.join(s['known'])} | {', '.join(s['outlier'])} | {', '.join(s['unknown'])}"
            for s in n["splits"]
        )
        + f". Far set: {n['far_data']}.",
        f"Closed world: the softmax head gives {n['share_softmax']:.1%} of unknown-class inputs "
        f"(digits: {n['share_far_softmax']:.1%}) to a known class with confidence > {CONFIDENT}; "
        f"the one-vs-rest sigmoid head {n['share_sigmoid']:.1%} ({n['share_far_sigmoid']:.1%}); "
        f"with the null component {n['share_null']:.1%} (its known-class confidence is capped "
        f"near 1 − ε = {1 - n['null_target']:.2f} by the soft null target).",
        f"r₀ against the energy of the same model: largest |r₀ − σ(−d₀ − L)| "
        f"{n['null_closed_form_error']:.1e}, {n['null_rank_violations']} order violations.",
        f"r₀'s AUROC: {n['null_auroc']:.3f} on unknown classes, {n['null_auroc_far']:.3f} on "
        f"digits; against the baseline chosen on validation (per seed: "
        f"{', '.join(n['chosen_baseline_per_seed'])}) it gains "
        f"{n['null_gain_over_best_near']:+.3f} (near) and {n['null_gain_over_best_far']:+.3f} "
        f"(far); the input-dependent null d₀(x) {n['null_x_gain_over_best_near']:+.3f} and "
        f"{n['null_x_gain_over_best_far']:+.3f}.",
        "C14c's comparison (judged on the unknown classes): r₀ against the softmax head's "
        f"strongest field detector ({', '.join(FIELD)}) on the same test set (per seed: "
        f"{', '.join(n['strongest_rival_per_seed'])}): the constant "
        f"null (a threshold on its energy) gains {n['null_gain_over_field_near']:+.3f}, the "
        f"input-dependent null {n['null_x_gain_over_field_near']:+.3f}, the null trained on "
        f"outliers {n['null_oe_gain_over_field_near']:+.3f}; against the field detector chosen "
        f"per seed on validation (per seed: {', '.join(n['chosen_rival_per_seed'])}) "
        f"{n['null_gain_over_field_chosen_near']:+.3f}, "
        f"{n['null_x_gain_over_field_chosen_near']:+.3f} and "
        f"{n['null_oe_gain_over_field_chosen_near']:+.3f}. Shown beside it, not judged: on the "
        f"corrupted known images {n['null_gain_over_field_corrupt']:+.3f}, "
        f"{n['null_x_gain_over_field_corrupt']:+.3f} and "
        f"{n['null_oe_gain_over_field_corrupt']:+.3f}.",
    ]


def _figure(first: dict[str, dict[str, Any]], split: OpenSetSplit, out: Path) -> Figure:
    from sklearn.metrics import roc_curve

    fig, axes = new_figure(ncols=len(SETS), width=4.6, height=3.6)
    unknown = split.test_unknown
    curves = [
        ("softmax", "msp", "#8c959f"),
        ("softmax", "energy", "#0969da"),
        ("sigmoid", "max_logit", "#57606a"),
        ("distance", "mahalanobis", "#8250df"),
        ("oe", "msp", "#bf8700"),
        ("null", "null", "#1a7f37"),
        ("null_x", "null", "#cf222e"),
        ("null_oe", "null", "#bc4c00"),
    ]
    for ax, where in zip(axes[0], SETS, strict=True):
        for kind, name, color in curves:
            scores = first[kind]["scores"]
            near = np.asarray(scores["near"][name])
            if where == "near":
                score, positive = near, unknown
            else:
                score = np.concatenate([near[~unknown], np.asarray(scores[where][name])])
                positive = np.arange(len(score)) >= (~unknown).sum()
            fpr, tpr, _ = roc_curve(positive, score)
            ax.plot(fpr, tpr, color=color, label=f"{kind}: {SCORES[name]}")
        ax.plot([0, 1], [0, 1], color="#d0d7de", linestyle="--", linewidth=1)
        ax.set_title(SETS[where], fontsize=8)
        ax.set_xlabel("false positive rate (known flagged)")
        ax.set_ylabel("true positive rate (unknown flagged)")
        ax.legend(fontsize=6, loc="lower right")
    name = save(fig, out, "e8_open_set.png")
    return Figure(
        name,
        "ROC curves for detecting unknown inputs (first seed's split): unknown classes of the "
        "same data set (left), the known test images under the registered corruptions "
        "(middle) and digits (right).",
    )


EXPERIMENT = Experiment(
    id="E8",
    title="Open set: softmax is closed-world; a null component and its rivals",
    claims=("C10", "C14c"),
    hypothesis=(
        "A softmax head gives a sizeable share of inputs from unseen classes to a known class "
        "with high confidence; a 'none of the above' component trained with the known classes "
        "(a constant d₀, a threshold on the energy; an input-dependent d₀(x); d₀(x) trained on "
        "outliers) lets the model decline them: its r₀ ranks unseen classes of the same data "
        "set above known inputs better than the strongest of the field's detectors on the plain "
        "softmax head (MSP, energy, max logit, Mahalanobis, KNN, ViM, ReAct), the best of them "
        "on the same test inputs."
    ),
    setup=(
        "Fashion-MNIST; per seed a random split of the ten classes into known, outlier "
        "(held out for outlier exposure and validation) and unknown test classes; far set: "
        "scikit-learn's digits drawn as 28 x 28 images; corrupted set: the known test images "
        "each under one registered corruption (Gaussian noise, blur or contrast). An MLP encoder (one hidden ReLU layer) "
        "with a linear softmax head, one-vs-rest sigmoids, a prototype (distance) head, the "
        "prototype head plus a null component (constant d₀, or a broad background component "
        "d₀(x)) trained with a 5% soft target on 'none of the above', the d₀(x) head also "
        "trained with the outlier classes' images toward the null, the softmax head with "
        "outlier exposure, and the prototype head with 5% label smoothing and no null; Adam. "
        "Detectors MSP, energy, max logit, Mahalanobis, KNN, ViM, ReAct + energy; the "
        "baseline is chosen per seed on the validation split. Unknown = positive; metrics "
        "from scikit-learn (roc_auc_score, average_precision_score, roc_curve)."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=(
        "closed_world_share_softmax",
        "null_oe_gain_over_field_near",
        "null_x_gain_over_field_near",
    ),
    meaning={
        "holds": (
            "Softmax assigns unseen classes to known ones, often confidently (C10), and every "
            "null's r₀ flags unseen classes better than the softmax head's strongest field "
            "detector (C14c)."
        ),
        "partly": (
            "Part holds; the criteria not met say which: the closed-world behaviour, or which "
            "null beats the strongest field detector on unseen classes."
        ),
        "fails": (
            "Softmax was not confidently closed-world here, and no null beat the softmax head's "
            "strongest field detector on unseen classes."
        ),
    },
    minutes={"smoke": 0.2, "quick": 0.8, "full": 7.0},
    controls=CONTROLS,
)

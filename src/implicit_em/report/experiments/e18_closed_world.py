r"""E18 (C10): softmax is closed-world; an out-of-distribution input is assigned to some class,
possibly with high confidence.

C10 (§6.3) says that the softmax's responsibilities sum to one, so that with no "none of the
above" option every input, however anomalous, is assigned to a class, and the confidence may be
high. Four heads share one backbone, one data split and one initialization seed
(`_closed_world.HEADS`): the paper's distance model (a prototype head, softmax over
$-\lVert h - \mu_k\rVert^2$), a linear softmax head, one-vs-rest sigmoids and the prototype head
with a "none of the above" component (a constant $d_0$). Per seed, a random six of
Fashion-MNIST's ten classes are known (trained on) and the other four are the near
out-of-distribution set; the far set is scikit-learn's digits drawn as 28 x 28 images (E8's
splits, `_open_set_splits`).

* "Sum to one": the largest $|\sum_k p_k - 1|$ of the normalized heads on the
  out-of-distribution inputs (algebra: a gate).
* "Possibly with high confidence" (an existential reading): the share of out-of-distribution
  inputs the head gives a known class with confidence at least 0.9, above a stated small share
  (the protocol's threshold: one input in a hundred), for the prototype head and the linear softmax head, near
  and far. The realistic negative control is the head that can abstain: the prototype head
  with the null component, trained the same way, read by the same code.
* Shown beside it, not judged: the softmax head's and the prototype head's confidence against
  the sigmoid head's, paired by seed (mean max-probability and confident share), and the null
  head's known-class mass $1 - r_0$.

In distribution each head's calibration is read as its expected calibration error (15 bins).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch.nn import Module

from implicit_em.report.experiments._cells import interval_cell
from implicit_em.report.experiments._closed_world import (
    CONFIDENT,
    ECE_BINS,
    HEADS,
    NORMALIZED,
    OOD_SETS,
    confidence_figure,
    max_probability,
    measure_head,
    read_head,
    train_head,
)
from implicit_em.report.experiments._neural import images_of, mean_std, plus_minus
from implicit_em.report.experiments._open_set_splits import (
    OpenSetSplit,
    digits_as_images,
    random_split,
)
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table

SETS = {"near": "held-out classes (near)", "far": "digits (far)"}
Measured = Mapping[str, Mapping[str, Any]]
"""One seed's measurements: an arm (a head, or a control's stand-in) to `measure_head`'s dict."""


@cache
def _far(config_key: str) -> Any:
    return digits_as_images(images_of(json.loads(config_key)).mean)


def split_of(config: dict[str, Any], seed: int) -> OpenSetSplit:
    """Seed `seed`'s split of the configuration's images (known classes, near set), with the
    digits as the far set."""
    keys = {k: config.get(k) for k in ("data", "n_train", "n_test", "device")}
    return random_split(images_of(config), _far(json.dumps(keys, sort_keys=True)), seed, config)


def _head_unit(config: dict[str, Any], kind: str, seed: int) -> dict[str, Any]:
    """`measure_head` of head `kind` on seed `seed`'s split, initialized from `seed`."""
    return measure_head(kind, split_of(config, seed), seed, config)


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per head and seed."""
    gpu = config.get("device", "cpu") != "cpu"
    return [
        Unit(
            f"{kind}-seed{seed}",
            _head_unit,
            {"config": config, "kind": kind, "seed": seed},
            gpu=gpu,
        )
        for seed in config["seeds"]
        for kind in config["heads"]
    ]


def confident_share(arm: str, where: str) -> Callable[[Measured], float]:
    """The share of `where`'s inputs that `arm` gives a class with confidence ≥ `CONFIDENT`."""
    return lambda m: float(m[arm][where]["share"])


def gap(arm: str, rival: str, where: str, stat: str) -> Callable[[Measured], float]:
    """`arm`'s reading `stat` (`mean` confidence or confident `share`) on `where` minus `rival`'s."""
    return lambda m: float(m[arm][where][stat] - m[rival][where][stat])


JUDGED = ("distance", "softmax")
"""The normalized heads whose confident shares C10's criteria read."""


def readings() -> dict[str, Callable[[Measured], float]]:
    """Each criterion's number as a function of one seed's measurements."""
    return {
        f"confident_share_{kind}_{where}": confident_share(kind, where)
        for kind in JUDGED
        for where in OOD_SETS
    }


def findings() -> dict[str, Callable[[Measured], float]]:
    """The comparisons shown beside the criteria, not judged: each normalized head against the
    sigmoid head (the normalization's share of the confidence, a reading the sentence does not
    make)."""
    out: dict[str, Callable[[Measured], float]] = {}
    for where in OOD_SETS:
        out[f"confidence_gap_{where}"] = gap("softmax", "sigmoid", where, "mean")
        out[f"confident_share_gap_{where}"] = gap("softmax", "sigmoid", where, "share")
        out[f"distance_gap_{where}"] = gap("distance", "sigmoid", where, "mean")
    return out


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    seeds, heads = config["seeds"], config["heads"]
    images = images_of(config)
    measured = [{k: results[f"{k}-seed{seed}"] for k in heads} for seed in seeds]
    numbers: dict[str, Any] = {
        "data": images.name,
        "far_data": "digits (scikit-learn, 8 x 8 drawn as 28 x 28)",
        "near_classes": [
            [images.classes[c] for c in split_of(config, seed).unknown] for seed in seeds
        ],
        "seeds": len(seeds),
        "steps": config["steps"],
        "confident": CONFIDENT,
        "ece_bins": ECE_BINS,
    }
    rows = []
    for kind in heads:
        series = {
            key: [m[kind][key] for m in measured] for key in ("accuracy", "ece", "confidence_known")
        }
        for where in OOD_SETS:
            for stat in ("mean", "share", "known_mass"):
                series[f"{stat}_{where}"] = [m[kind][where][stat] for m in measured]
        for key, values in series.items():
            numbers[f"{key}_{kind}"], numbers[f"{key}_{kind}_std"] = mean_std(values)
        rows.append(
            (
                HEADS[kind],
                plus_minus(series["accuracy"]),
                plus_minus(series["ece"]),
                *(
                    interval_cell(series[k])
                    for k in ("mean_near", "share_near", "mean_far", "share_far")
                ),
            )
        )
    samples = {name: [read(m) for m in measured] for name, read in readings().items()}
    shown = {name: [read(m) for m in measured] for name, read in findings().items()}
    for name, values in (samples | shown).items():
        numbers[name], numbers[f"{name}_std"] = mean_std(values)
    numbers["sum_to_one_error"] = max(
        m[kind][where]["sum_error"] for m in measured for kind in NORMALIZED for where in OOD_SETS
    )
    gap_rows = [
        (label, *(interval_cell(shown[f"{key}_{w}"]) for w in OOD_SETS))
        for key, label in (
            ("confidence_gap", "softmax − sigmoid, mean max-probability"),
            ("confident_share_gap", f"softmax − sigmoid, share ≥ {CONFIDENT}"),
            ("distance_gap", "prototype − sigmoid, mean max-probability"),
        )
    ]
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                f"Each head in distribution (test accuracy, ECE over {ECE_BINS} bins; mean ± sd) "
                f"and out of distribution (mean max-probability, for the sigmoid head the max "
                f"sigmoid, and the share of inputs at ≥ {CONFIDENT}; mean and 95% interval over "
                f"{len(seeds)} seeds)",
                (
                    "head",
                    "accuracy",
                    "ECE",
                    "mean conf., near",
                    f"share ≥ {CONFIDENT}, near",
                    "mean conf., far",
                    f"share ≥ {CONFIDENT}, far",
                ),
                tuple(rows),
            ),
            Table(
                "Shown beside C10, not judged: each normalized head against the one-vs-rest "
                "sigmoid head, paired by seed (same split, backbone and initialization seed; mean "
                "and 95% interval)",
                ("comparison", SETS["near"], SETS["far"]),
                tuple(gap_rows),
            ),
        ],
        figures=[
            Figure(
                confidence_figure(measured, {k: HEADS[k] for k in heads}, out, CONFIDENT),
                "Each head's mean max-probability out of distribution (near: the held-out "
                "Fashion-MNIST classes; far: the digits), one dot per seed; the dashed line is "
                f"the confidence {CONFIDENT}",
            )
        ],
        notes=_notes(numbers),
    )


def _notes(n: dict[str, Any]) -> list[str]:
    def head(kind: str) -> str:
        return (
            f"{kind}: accuracy {n[f'accuracy_{kind}']:.3f}, ECE {n[f'ece_{kind}']:.3f}, "
            f"confident (≥ {CONFIDENT}) on {n[f'share_near_{kind}']:.1%} of the held-out classes "
            f"and {n[f'share_far_{kind}']:.1%} of the digits"
        )

    notes = [
        "Near classes per seed: " + "; ".join(", ".join(c) for c in n["near_classes"]) + ".",
        "; ".join(head(k) for k in HEADS if f"accuracy_{k}" in n) + ".",
        f"Sum to one: the normalized heads' probabilities deviate from one by at most "
        f"{n['sum_to_one_error']:.1e} on the out-of-distribution inputs (algebra).",
        f"Beside it, not judged: softmax − sigmoid {n['confidence_gap_near']:+.3f} near and "
        f"{n['confidence_gap_far']:+.3f} far (mean max-probability), "
        f"{n['confident_share_gap_near']:+.3f} and {n['confident_share_gap_far']:+.3f} (confident "
        f"share); prototype − sigmoid {n['distance_gap_near']:+.3f} and "
        f"{n['distance_gap_far']:+.3f}. The sigmoid head may give every class a low probability "
        "but need not: how much of the confidence the normalization adds is not what the "
        "sentence states.",
    ]
    if "known_mass_near_null" in n:
        notes.append(
            f"The head that can abstain (null component) keeps {n['known_mass_near_null']:.3f} "
            f"of its mass on the known classes near and {n['known_mass_far_null']:.3f} far "
            f"(in distribution about 1 − ε)."
        )
    return notes


@cache
def _control_model(config_key: str, seed: int, kind: str, plant: str) -> Module:
    """A head trained on seed `seed`'s split under `PLANTS[plant]`, from initialization `seed`;
    trained once per process."""
    config = json.loads(config_key)
    return train_head(kind, PLANTS[plant](split_of(config, seed)), seed, config)


@cache
def _control_arm(key: str, seed: int, arm: str) -> dict[str, Any]:
    """One control arm (`CONTROL_ARMS`) on seed `seed` of configuration `key`, read by
    `read_head` with the head's own confidence; computed once per process."""
    config = json.loads(key)
    kind, plant = CONTROL_ARMS[arm]
    model = _control_model(key, seed, kind, plant)
    return read_head(model, PLANTS[plant](split_of(config, seed)), max_probability(kind))


def _scaled(split: OpenSetSplit, factor: float = 4.0) -> OpenSetSplit:
    """The near and far sets replaced by the known test inputs scaled by `factor`: far out along
    the known classes, where the logits' differences grow with the scale."""
    known = split.y_test >= 0
    planted = factor * split.x_test[known]
    return replace(
        split,
        x_test=torch.cat([split.x_test[known], planted]),
        y_test=torch.cat([split.y_test[known], torch.full_like(split.y_test[known], -1)]),
        x_far=planted,
    )


def _same(split: OpenSetSplit) -> OpenSetSplit:
    return split


PLANTS: dict[str, Callable[[OpenSetSplit], OpenSetSplit]] = {"none": _same, "scaled": _scaled}
CONTROL_ARMS: dict[str, tuple[str, str]] = {
    "softmax_scaled": ("softmax", "scaled"),
    "distance_scaled": ("distance", "scaled"),
    "null": ("null", "none"),
}
"""Control arms: (head, plant on the split). The positives are a normalized head on planted
out-of-distribution inputs (the known test inputs scaled by 4); the realistic negative is the
prototype head with a "none of the above" component on the split as drawn."""


def _measure(
    arm: str, read: Callable[[Measured], float], head: str
) -> Callable[[dict[str, Any]], list[float]]:
    """A control's measurement: per control seed, `read` of `head` measured as the control arm
    `arm` gives it."""

    def measure(config: dict[str, Any]) -> list[float]:
        key = json.dumps(dict(config), sort_keys=True)
        return [read({head: _control_arm(key, seed, arm)}) for seed in config["seeds"]]

    return measure


def _controls() -> dict[str, Controls]:
    out = {}
    for kind in JUDGED:
        for where in OOD_SETS:
            read = confident_share(kind, where)
            out[f"confident_share_{kind}_{where}"] = Controls(
                positive=Control(
                    f"the {HEADS[kind]} on out-of-distribution inputs planted as the known test "
                    "inputs scaled by 4",
                    _measure(f"{kind}_scaled", read, kind),
                ),
                negative=Control(
                    "the prototype head with a 'none of the above' component (constant "
                    "d₀, 5% soft target), trained on the same split from the same seed and read "
                    "by the same code: a head that can abstain",
                    _measure("null", read, kind),
                ),
            )
    return out


CONTROLS = _controls()

EXPERIMENT = Experiment(
    id="E18",
    title="Closed world: out-of-distribution inputs assigned, possibly with high confidence",
    claims=("C10",),
    hypothesis=(
        "A normalized head (the paper's prototype head, and a linear softmax head) sums its "
        "probabilities to one over the known classes, so it assigns every out-of-distribution "
        "input to some class, and some of them with high confidence (≥ 0.9); the same head "
        "with a 'none of the above' component, which can abstain, does not."
    ),
    setup=(
        "Fashion-MNIST; per seed a random six classes known (trained on), the other four the "
        "near out-of-distribution set; far set: scikit-learn's digits drawn as 28 x 28 images. "
        "One MLP encoder (one hidden ReLU layer) with a linear softmax head (cross-entropy), "
        "one-vs-rest sigmoids (binary cross-entropy), a prototype head (softmax over minus "
        "squared Euclidean distances to learned prototypes) or the prototype head with a "
        "constant null component d₀ (cross-entropy over K + 1 against a 5% soft target on the "
        "null); Adam, the same steps and initialization seed for all four. Confidence: the "
        "largest probability of a known class (for the sigmoid head the largest sigmoid); "
        "calibration: ECE over 15 equal-width bins."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("confident_share_distance_near", "confident_share_distance_far", "sum_to_one_error"),
    meaning={
        "holds": (
            "Every out-of-distribution input is assigned to a known class (the probabilities sum "
            "to one) and a material share of them with confidence ≥ 0.9, near and far, by the "
            "prototype head and the softmax head: C10 as stated."
        ),
        "partly": (
            "Some heads or sets give confident assignments and some do not; the criteria not "
            "met say which."
        ),
        "fails": (
            "No normalized head gave more than a small share of out-of-distribution inputs a "
            "class with confidence ≥ 0.9: the closed world assigned them, but not confidently."
        ),
    },
    minutes={"smoke": 0.2, "quick": 0.6, "full": 6.0},
    controls=CONTROLS,
)

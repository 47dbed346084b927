r"""E6 (C9, C14a, C14d): collapse without a volume term in a decoder-free encoder, and its cures.

One linear layer with a ReLU, $d(x) = \mathrm{ReLU}(N(Wx + b)) \in \mathbb{R}^K_{\ge 0}$, read as
K distances, is trained on images with no decoder (`_encoders.VARIANTS`): the LSE objective
alone; with the volume term itself, $-\log\det(\operatorname{Cov}_b d + \varepsilon I)$; with its
two surrogates (variance, decorrelation); and the LSE alone behind the normalization layers that
might stand in for the volume term: LayerNorm without affine parameters and BatchNorm without
affine parameters, beside the two patches that cannot work (LayerNorm with its bias, which can
switch every unit off; weight decay, which pulls W towards 0 as the LSE term does). The same
encoder is also read by a prototype head and trained by cross-entropy (the supervised prototype
classifier), alone, with the log-det, or behind either normalization layer: reported beside the
encoders, with no vote.

Since $d \ge 0$, $-\log\sum_j e^{-d_j} \ge -\log K$ with equality exactly when every $d_j = 0$:
without a volume term the global optimum switches every unit off (C9). Whether gradient descent
gets there within the budget is what `dead_fraction_lse` measures. Beside the encoders, at the
same width K and read by the same linear probe: PCA and the untrained encoder.

Each criterion's known-answer controls run `train_encoder` on planted starts, frozen (learning
rate 0): every unit constant over the images (dead by construction), or every unit spread
(alive), and, for the tracer, inputs shrunk by a factor each step (the distance scale falls by
construction).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from implicit_em.report.experiments._collapse_baselines import (
    COMPARATORS,
    comparator_probes,
    comparator_units,
)
from implicit_em.report.experiments._collapse_figure import (
    collapse_figure,
)
from implicit_em.report.experiments._encoders import (
    DEAD_VARIANCE,
    VARIANTS,
    train_encoder,
)
from implicit_em.report.experiments._neural import (
    Images,
    images_of,
    load_images,
    mean_std,
    plus_minus,
)
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.rules.protocol import load_protocol
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Outcome, Table

SUBSTITUTES = {
    "layernorm_plain": "lse_log_det",
    "batchnorm": "lse_log_det",
    "layernorm": "lse_log_det",
    "weight_decay": "lse_log_det",
    "ce": "ce_log_det",
    "ce_layernorm_plain": "ce_log_det",
    "ce_batchnorm": "ce_log_det",
}
"""Each variant read against the explicit volume term of its own model (`probe_gap_<variant>`)."""


def dead_fractions(runs: list[dict[str, Any]]) -> list[float]:
    """Per run: the share of units whose variance over the training images is below
    `DEAD_VARIANCE`."""
    return [r["final"]["dead_fraction"] for r in runs]


def probe_gaps(runs: list[dict[str, Any]], reference: list[dict[str, Any]]) -> list[float]:
    """Per seed: the probe accuracy of `runs` minus that of `reference` (paired by seed)."""
    return [a["final"]["probe"] - b["final"]["probe"] for a, b in zip(runs, reference, strict=True)]


def scale_ratios(runs: list[dict[str, Any]]) -> list[float]:
    """Per run: the distance scale the tracer read at its last measured step over its first
    (the `shrinking_scale` alarm fires below 0.1)."""
    ratios = []
    for r in runs:
        scale = r["trace"]["scale"]
        ratios.append(scale[-1] / scale[0] if scale and scale[0] > 0 else float("nan"))
    return ratios


def _encoder_unit(config: dict[str, Any], variant: str, seed: int) -> dict[str, Any]:
    """`train_encoder` of one variant and seed on the configuration's images."""
    return train_encoder(images_of(config), variant, seed, config)


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per variant and seed (an encoder trained), and the comparators' probes."""
    gpu = config.get("device", "cpu") != "cpu"
    return [
        Unit(f"{v}-seed{s}", _encoder_unit, {"config": config, "variant": v, "seed": s}, gpu=gpu)
        for v in VARIANTS
        for s in config["seeds"]
    ] + comparator_units(config)


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    images = images_of(config)
    seeds = config["seeds"]
    runs = {v: [results[f"{v}-seed{s}"] for s in seeds] for v in VARIANTS}

    numbers: dict[str, Any] = {
        "data": images.name,
        "units": config["units"],
        "seeds": len(seeds),
        "steps": config["steps"],
        "train_images": len(images.y_train),
    }
    samples: dict[str, list[float]] = {}
    rows = []
    for v, spec in VARIANTS.items():
        finals = [r["final"] for r in runs[v]]
        for key in ("dead", "redundancy", "mean_sq_corr", "entropy", "l0", "probe", "weight_norm"):
            mean, std = mean_std([f[key] for f in finals])
            numbers[f"{key}_{v}"] = mean
            numbers[f"{key}_{v}_std"] = std
        numbers[f"log_det_{v}"] = float(np.mean([f["log_det"] for f in finals]))
        samples[f"dead_fraction_{v}"] = dead_fractions(runs[v])
        samples[f"trace_scale_ratio_{v}"] = scale_ratios(runs[v])
        numbers[f"dead_fraction_{v}"] = float(np.mean(samples[f"dead_fraction_{v}"]))
        numbers[f"trace_scale_ratio_{v}"] = float(np.mean(samples[f"trace_scale_ratio_{v}"]))
        fired = [r["alarms"] for r in runs[v]]
        numbers[f"alarm_seed_share_{v}"] = sum(bool(a) for a in fired) / len(fired)
        numbers[f"alarms_{v}"] = sorted({name for a in fired for name in a})
        residuals = [x for r in runs[v] for x in r["trace"]["residual"]]
        numbers[f"trace_residual_max_{v}"] = max(residuals) if residuals else None
        kinds = ", ".join(
            f"{name} ({sum(name in a for a in fired)}/{len(fired)} seeds, first at step "
            f"{min(a[name] for a in fired if name in a)})"
            for name in numbers[f"alarms_{v}"]
        )
        rows.append(
            (
                spec.label,
                plus_minus([f["dead"] for f in finals], 1),
                plus_minus([f["log_det"] for f in finals], 1),
                plus_minus([f["redundancy"] for f in finals], 2),
                plus_minus([f["l0"] for f in finals], 3),
                plus_minus([f["probe"] for f in finals], 3),
                kinds or "none",
            )
        )
    for v, reference in SUBSTITUTES.items():
        samples[f"probe_gap_{v}"] = probe_gaps(runs[v], runs[reference])
        numbers[f"probe_gap_{v}"] = float(np.mean(samples[f"probe_gap_{v}"]))
    comparators = comparator_probes(config, results)
    for name, values in comparators.items():
        numbers[f"probe_{name}"] = float(np.mean(values))
        rows.append((COMPARATORS[name], "", "", "", "", plus_minus(values, 3), "—"))

    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                f"Encoders on {images.name} ({config['units']} units, {len(seeds)} seeds, "
                f"mean ± std; dead = variance over the training images < {DEAD_VARIANCE})",
                (
                    "objective",
                    "dead units",
                    "log det(Cov d + εI)",
                    "‖Corr − I‖²_F (live units)",
                    "L0 (share active)",
                    "linear probe accuracy",
                    "tracer alarms",
                ),
                tuple(rows),
            )
        ],
        figures=[collapse_figure(runs, config, out, images.name)],
        notes=_notes(numbers),
    )


def _notes(n: dict[str, Any]) -> list[str]:
    k = n["units"]

    def dead(v: str) -> str:
        return f"{n[f'dead_{v}']:.1f} of {k}"

    notes = [
        f"LSE alone: {dead('lse')} units dead, probe accuracy {n['probe_lse']:.3f}; with the "
        f"explicit log-det {dead('lse_log_det')} dead, probe {n['probe_lse_log_det']:.3f}; with "
        f"variance + decorrelation {dead('lse_var_decor')} dead, probe "
        f"{n['probe_lse_var_decor']:.3f}.",
    ]
    thresholds = {c.number: c.threshold for c in load_protocol("E6").criteria}
    for v, name in (("layernorm_plain", "LayerNorm without affine"), ("batchnorm", "BatchNorm")):
        gap = n[f"probe_gap_{v}"]
        verdict = (
            "substitutes for the volume term here"
            if gap >= thresholds[f"probe_gap_{v}"]
            and n[f"dead_fraction_{v}"] <= thresholds["dead_fraction_layernorm_plain"]
            else "does not substitute for the volume term here"
        )
        notes.append(
            f"{name} under LSE alone: {dead(v)} dead, final log det {n[f'log_det_{v}']:.1f} "
            f"(explicit log-det {n['log_det_lse_log_det']:.1f}), probe {n[f'probe_{v}']:.3f} "
            f"({gap:+.3f} against the explicit log-det): it {verdict}."
        )
    notes.append(
        "The supervised prototype classifier (the same encoder, prototype head, cross-entropy): "
        + "; ".join(
            f"{label} {dead(v)} dead, final log det {n[f'log_det_{v}']:.1f}, probe "
            f"{n[f'probe_{v}']:.3f}"
            + ("" if v == "ce_log_det" else f" ({n[f'probe_gap_{v}']:+.3f} against its log-det)")
            for v, label in (
                ("ce", "alone"),
                ("ce_log_det", "with the log-det"),
                ("ce_layernorm_plain", "LayerNorm without affine"),
                ("ce_batchnorm", "BatchNorm without affine"),
            )
        )
        + "."
    )
    notes.append(
        f"The patches that cannot work: LayerNorm with its affine bias leaves {dead('layernorm')} "
        f"dead, weight decay {dead('weight_decay')}."
    )
    notes.append(
        f"The tracer's distance scale at the end over its start, LSE alone: "
        f"{n['trace_scale_ratio_lse']:.3g} (alarm below 0.1); alarms on LSE alone: "
        + (", ".join(n["alarms_lse"]) or "none")
        + "; on the explicit log-det: "
        + (", ".join(n["alarms_lse_log_det"]) or "none")
        + ". Dead ReLU units all output d = 0, so their responsibilities are uniform: the "
        "collapse can show only in the distance scale."
    )
    notes.append(
        f"Against features no LSE term shaped, at the same width: PCA {n['probe_pca']:.3f}, "
        f"the untrained encoder {n['probe_random']:.3f}."
    )
    return notes


# -- known-answer controls ---------------------------------------------------------------------


@cache
def _control_images(data: str) -> Images:
    return load_images({"data": data, "device": "cpu"})


@cache
def _planted_run(
    key: str, variant: str, start: str, input_decay: float, probe: bool, seed: int
) -> dict[str, Any]:
    config = json.loads(key)
    planted = {
        **config,
        "lr": 0.0,
        "start": start,
        "input_decay": input_decay,
        "probe_train": config["probe_train"] if probe else 0,
    }
    return train_encoder(_control_images(config["data"]), variant, seed, planted)


def _planted(
    config: dict[str, Any], variant: str, start: str, input_decay: float = 1.0, probe: bool = False
) -> list[dict[str, Any]]:
    """`train_encoder` per control seed from a planted `start`, frozen (learning rate 0); runs
    shared between controls are computed once."""
    key = json.dumps({k: v for k, v in config.items() if k != "device"}, sort_keys=True)
    return [_planted_run(key, variant, start, input_decay, probe, s) for s in config["seeds"]]


_DEAD = "every unit planted constant over the images (W = 0, b = −1), frozen"
_ALIVE = "every unit planted spread over the images (W × 10, b = 0), frozen"


def _dead_controls(variant: str, collapse: bool) -> Controls:
    """Controls of `dead_fraction_<variant>`: planted dead and planted alive, the positive one
    the side the criterion looks for (`collapse`: many dead)."""
    dead = Control(_DEAD, lambda c: dead_fractions(_planted(c, variant, "constant")))
    alive = Control(_ALIVE, lambda c: dead_fractions(_planted(c, variant, "spread")))
    return Controls(positive=dead, negative=alive) if collapse else Controls(alive, dead)


def _gap_controls(variant: str) -> Controls:
    """Controls of `probe_gap_<variant>`: the explicit log-det encoder read against itself (a
    perfect substitute), and the variant planted dead against it."""

    def reference(c: dict[str, Any]) -> list[dict[str, Any]]:
        return _planted(c, "lse_log_det", "spread", probe=True)

    return Controls(
        positive=Control(
            "the variant planted as the log-det encoder itself (spread, frozen)",
            lambda c: probe_gaps(reference(c), reference(c)),
        ),
        negative=Control(
            f"the variant planted dead ({_DEAD}) against the log-det encoder spread",
            lambda c: probe_gaps(_planted(c, variant, "constant", probe=True), reference(c)),
        ),
    )


CONTROLS = {
    "dead_fraction_lse": _dead_controls("lse", collapse=True),
    "dead_fraction_lse_log_det": _dead_controls("lse_log_det", collapse=False),
    "dead_fraction_lse_var_decor": _dead_controls("lse_var_decor", collapse=False),
    "dead_fraction_layernorm_plain": _dead_controls("layernorm_plain", collapse=False),
    "probe_gap_layernorm_plain": _gap_controls("layernorm_plain"),
    "probe_gap_batchnorm": _gap_controls("batchnorm"),
    "trace_scale_ratio_lse": Controls(
        positive=Control(
            _ALIVE + ", inputs shrunk by the control's input_decay each step",
            lambda c: scale_ratios(_planted(c, "lse", "spread", c["input_decay"])),
        ),
        negative=Control(
            _ALIVE + ", inputs unchanged", lambda c: scale_ratios(_planted(c, "lse", "spread"))
        ),
    ),
}


EXPERIMENT = Experiment(
    id="E6",
    title="Collapse without a volume term in a decoder-free encoder, and what stands in for it",
    claims=("C9", "C14a", "C14d"),
    hypothesis=(
        "Trained with the log-sum-exp objective alone, a ReLU encoder read as distances loses "
        "its units (nothing pays for volume); the explicit log-det, and its variance and "
        "decorrelation surrogates, keep every unit alive; normalization layers without affine "
        "parameters keep the units alive and as informative as the log-det does; the tracer's "
        "distance scale shows the collapse."
    ),
    setup=(
        "d = ReLU(N(Wx + b)) with W of K x D (64 x 784 at full size, 32 x 784 at quick size, "
        "both on Fashion-MNIST), pixels in [0, 1] centred by the training mean, Adam (lr 1e-3, "
        "batch 256). Objectives: LSE alone; + −log det(Cov_b d + 1e-4 I); + variance + "
        "decorrelation (weights 1); LSE alone behind LayerNorm (with and without affine), "
        "BatchNorm (without affine), or with AdamW weight decay 0.1. Dead: variance over the "
        "training images < 0.01. Probe: scikit-learn LogisticRegression on the standardized "
        "features, test accuracy. The supervised prototype classifier reads the same encoder "
        "with a prototype head z_c = −‖d − μ_c‖² trained by cross-entropy. The Tracer (default "
        "thresholds) runs on every training."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("dead_fraction_lse", "dead_fraction_lse_log_det", "probe_gap_batchnorm"),
    meaning={
        "holds": (
            "C9 holds for this encoder: with no volume term the LSE objective switches every "
            "unit off; the explicit log-det and its surrogates keep the units alive (C14a); "
            "normalization layers without affine parameters stand in for the volume term; the "
            "tracer's distance scale shows the collapse (C14d)."
        ),
        "partly": (
            "Part of the picture holds; the criteria not met say which: collapse without the "
            "volume term, survival with it, normalization standing in for it, or the tracer."
        ),
        "fails": (
            "The LSE-only encoder did not collapse, the volume terms did not help, no "
            "normalization stood in, and the tracer did not see it."
        ),
    },
    minutes={"smoke": 0.2, "quick": 0.7, "full": 9.0},
    controls=CONTROLS,
)

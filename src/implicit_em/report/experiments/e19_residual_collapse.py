r"""E19 (C9, C14a): collapse and volume control in a pre-norm residual MLP with a prototype head.

E6 read collapse in a one-layer encoder whose outputs are the distances, where the LSE
objective's global optimum is collapse for any model without a volume term: decided by
construction, in an architecture nobody trains. Here the network is the residual stream of a
pre-LN transformer without attention (`_residual_mlp.PreNormResidualMLP`), read by $K$
prototypes (`PrototypeHead`: $d_k = \lVert e(x) - \mu_k\rVert^2$) and trained on unlabelled
Fashion-MNIST by the paper's unsupervised objective $-\log\sum_k e^{-d_k}$
(`_residual_collapse.ARMS`). Whether gradient descent on such a network ends collapsed, and
which of the practitioner's patches (LayerNorm with and without affine, BatchNorm, weight decay)
or volume terms (log-det, variance + decorrelation) keep its components apart, is measured, not
given.

Per arm and seed, on the held-out images (`_component_use`): the distinct components in use,
$\exp I(x; k)$, as a share of $K$ (the first measure); the share of dead prototypes (mass below
$0.1/K$) and the largest component's share (alternative measures). Each rival must work on its
own task (it lowers its objective; a volume arm must keep class structure: k-NN accuracy at
least 0.6). Every negative control is realistic: the same network trained without the one
mechanism the criterion credits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from implicit_em.report.experiments._cells import interval_cell
from implicit_em.report.experiments._neural import images_of, mean_std, plus_minus
from implicit_em.report.experiments._residual_collapse import ARMS, train_arm
from implicit_em.report.experiments._residual_figure import components_figure
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.rules.protocol import load_protocol
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table

MEASURES = {
    "distinct_share": "distinct components / K",
    "dead_share": "dead prototypes (share)",
    "largest_share": "largest component's share",
}
"""The per-seed collapse measures the criteria read, `<measure>_<arm>`."""


def _arm_unit(config: dict[str, Any], arm: str, seed: int) -> dict[str, Any]:
    """`train_arm` of one arm and seed on the configuration's images."""
    return train_arm(images_of(config), arm, seed, config)


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per arm and seed."""
    gpu = config.get("device", "cpu") != "cpu"
    return [
        Unit(f"{arm}-seed{seed}", _arm_unit, {"config": config, "arm": arm, "seed": seed}, gpu=gpu)
        for arm in config["arms"]
        for seed in config["seeds"]
    ]


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    seeds, arms, k = config["seeds"], config["arms"], config["components"]
    runs = {arm: [results[f"{arm}-seed{seed}"] for seed in seeds] for arm in arms}
    numbers: dict[str, Any] = {
        "data": images_of(config).name,
        "components": k,
        "width": config["width"],
        "blocks": config["blocks"],
        "seeds": len(seeds),
        "steps": config["steps"],
        "dead_mass": config["dead_mass"],
    }
    samples: dict[str, list[float]] = {}
    rows = []
    for arm in arms:
        finals = [r["final"] for r in runs[arm]]
        for key in ("distinct", "effective", "knn", "knn_untrained", "embedding_scale"):
            numbers[f"{key}_{arm}"], numbers[f"{key}_{arm}_std"] = mean_std(
                [f[key] for f in finals]
            )
        numbers[f"loss_drop_{arm}"] = mean_std([f["loss_start"] - f["loss_end"] for f in finals])[0]
        for measure in MEASURES:
            samples[f"{measure}_{arm}"] = [f[measure] for f in finals]
            numbers[f"{measure}_{arm}"] = mean_std(samples[f"{measure}_{arm}"])[0]
        rows.append(
            (
                ARMS[arm].label,
                interval_cell([f["distinct"] for f in finals], 2),
                plus_minus([f["effective"] for f in finals], 2),
                interval_cell(samples[f"dead_share_{arm}"]),
                interval_cell(samples[f"largest_share_{arm}"]),
                plus_minus([f["knn"] for f in finals]),
                plus_minus([f["loss_start"] - f["loss_end"] for f in finals], 2),
            )
        )
    criteria = {c.number for c in load_protocol("E19").criteria}
    return Outcome(
        numbers=numbers,
        samples={name: values for name, values in samples.items() if name in criteria},
        tables=[
            Table(
                f"Component use on the held-out images ({k} prototypes; mean and 95% interval, "
                f"or mean ± sd, over {len(seeds)} seeds). Distinct: exp of the mutual "
                "information between input and component; exp H(r̄): the effective number "
                f"of the mean responsibilities; dead: mass below {config['dead_mass']}/K",
                (
                    "arm",
                    "distinct components",
                    "exp H(r̄)",
                    "dead share",
                    "largest share",
                    f"{config['knn']}-NN accuracy",
                    "loss drop (nats)",
                ),
                tuple(rows),
            )
        ],
        figures=[
            Figure(
                components_figure(runs, {a: ARMS[a].label for a in arms}, k, out),
                "Distinct components in use over training (mean over seeds) and at the end "
                f"(one dot per seed); dashed: K/2 = {k // 2}",
            )
        ],
        notes=_notes(numbers, arms),
    )


def _notes(n: dict[str, Any], arms: list[str]) -> list[str]:
    k = n["components"]
    read = "; ".join(
        f"{ARMS[a].label}: {n[f'distinct_{a}']:.1f} of {k} (exp H(r̄) {n[f'effective_{a}']:.1f}, "
        f"k-NN {n[f'knn_{a}']:.3f})"
        for a in arms
    )
    return [
        f"Distinct components in use at the end: {read}.",
        f"Untrained embedding's k-NN accuracy: {n[f'knn_untrained_{arms[0]}']:.3f} ({arms[0]}).",
    ]


@cache
def _trained(config_key: str, arm: str, seed: int) -> dict[str, Any]:
    """`train_arm` on the control configuration, trained once per process."""
    config = json.loads(config_key)
    return train_arm(images_of(config), arm, seed, config)


def _measure(arm: str, measure: str, plant: str | None) -> Control:
    def run(config: Mapping[str, Any]) -> list[float]:
        key = json.dumps(dict(config), sort_keys=True)
        out = []
        for seed in config["seeds"]:
            trained = _trained(key, arm, seed)
            out.append(trained["planted"][plant][measure] if plant else trained["final"][measure])
        return out

    says = {
        "one_takes_all": "responsibilities planted as one component taking every input",
        "dealt": "responsibilities planted as every input dealt to one component in turn "
        "(each component an equal share)",
    }
    if plant:
        return Control(f"the trained network ({ARMS[arm].label}), {says[plant]}", run)
    return Control(f"realistic: the same network trained as {ARMS[arm].label}", run)


NEGATIVE = {
    "bare": "bare_log_det",
    "layernorm": "bare",
    "layernorm_plain": "bare",
    "batchnorm": "bare",
    "weight_decay": "layernorm",
    "log_det": "layernorm",
    "var_decor": "layernorm",
}
"""Each judged arm's realistic negative: the same network without the one mechanism its
criteria credit (for the network without normalization, the volume term restored). The positive
control reads that same trained network with its held-out responsibilities planted (one
component taking every input, or inputs dealt to the components in turn)."""


def _controls() -> dict[str, Controls]:
    out = {}
    for criterion in load_protocol("E19").criteria:
        measure, arm = next(
            (m, criterion.number[len(m) + 1 :])
            for m in MEASURES
            if criterion.number.startswith(f"{m}_")
        )
        plant = "one_takes_all" if arm == "bare" else "dealt"
        out[criterion.number] = Controls(
            positive=_measure(NEGATIVE[arm], measure, plant),
            negative=_measure(NEGATIVE[arm], measure, None),
        )
    return out


CONTROLS = _controls()

EXPERIMENT = Experiment(
    id="E19",
    title="Collapse and volume control in a pre-norm residual MLP with a prototype head",
    claims=("C9", "C14a"),
    hypothesis=(
        "Trained by the LSE objective alone, a residual network's prototype head collapses "
        "onto a few components; normalization layers and weight decay patch it, and an "
        "explicit volume term (log-det, or variance and decorrelation) controls it."
    ),
    setup=(
        "Fashion-MNIST, unlabelled; a pre-norm residual MLP (input projection, residual "
        "blocks x + W2 GELU(W1 N(x)), final N) read by K = 16 prototypes through squared "
        "Euclidean distances, initialized on the embeddings of 16 training images, and "
        "trained by Adam on −log Σ_k exp(−d_k): without normalization; with LayerNorm "
        "(affine), LayerNorm without affine, BatchNorm, or LayerNorm with AdamW weight decay "
        "0.1; with LayerNorm plus the log-det −log det(Cov_b d + 1e-4 I) of the batch's "
        "distances, or its variance and decorrelation surrogates. Read on the test images: "
        "the distinct components in use (exp of the input–component mutual information), "
        "dead prototypes (mass < 0.1/K), the largest component's share, and the embedding's "
        "10-NN accuracy."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("distinct_share_bare", "distinct_share_layernorm", "distinct_share_log_det"),
    meaning={
        "holds": (
            "Without normalization the network collapses; every patch and both volume terms "
            "keep at least half the components in use."
        ),
        "partly": (
            "Some arms keep their components apart and some do not: the criteria not met name "
            "the arms that do not control volume (or the network that did not collapse)."
        ),
        "fails": (
            "No arm reads as the paper says: the network without normalization kept its "
            "components, or no patch nor volume term kept half of them."
        ),
    },
    minutes={"smoke": 0.2, "quick": 0.5, "full": 60.0},
    controls=CONTROLS,
)

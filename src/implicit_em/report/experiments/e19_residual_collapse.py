r"""E19 (C9, C14a): collapse and volume control in a pre-norm residual MLP with a prototype head,
trained by cross-entropy over distances (where the paper puts normalization layers) and by the
LSE objective alone (shown).

E6 read collapse in a one-layer encoder whose outputs are the distances, where the LSE
objective's global optimum is collapse for any model without a volume term: decided by
construction, in an architecture nobody trains. Here the network is the residual stream of a
pre-LN transformer without attention (`_residual_mlp.PreNormResidualMLP`), read by prototypes
(`PrototypeHead`: $d_k = \lVert e(x) - \mu_k\rVert^2$) on Fashion-MNIST.

**Cross-entropy (the criteria C9 and C14a read).** §6.2 puts the missing volume term, and the
practitioner's patches for it, in networks trained by cross-entropy or attention. The backbone
is read by one prototype per class and trained by the cross-entropy of the labels under
$\operatorname{softmax}(-d)$ (`_residual_ce`): without normalization, with LayerNorm,
BatchNorm or weight decay, or with the explicit log-det of the embedding's covariance. The
collapse measure is §6.2's: inputs mapped to nearby points, so that one prototype takes them
and the responsibilities no longer tell them apart. It is the **dominance**
$\max_c \frac1N\#\{i : \arg\min_k d_{ik} = c\}$ on the held-out images (near $1/C = 0.1$
for a network that tells the balanced classes apart, 1 when one prototype takes every input):
criterion `dominance_ce_bare` $\ge 0.5$ (the bare network collapses). It reads the nearest
prototype, not the softmax's mass, so a network whose distances are all small (flat, equal
responsibilities) does not read as collapsed by its temperature alone. The patches' criteria
need a collapse to patch: where the bare network does not collapse (as at the protocol's
step size, and at every larger one its pilot tried), the same network without a patch cannot
serve as a realistic negative control, so the patched arms' dominance is shown, not judged
(C9's "patch" part reads not tested with that reason). The held-out embedding's effective
rank $\exp H(p)$ ($p$ the spectrum of its covariance, `_embedding_volume`) is shown for every
arm: cross-entropy folds each class onto its prototype (rank near $C$, neural collapse) while
the responsibilities stay class-telling; it is its own optimum, not the paper's collapse. It
votes only as volume control, on C14a: the log-det arm keeps its held-out embedding's effective
rank above $C = 10$ (`rank_ce_log_det`), where the bare network's falls below; that arm must
classify (test accuracy at least 0.7).

**The LSE alone (shown, not voted, but for its volume arms).** The unlabelled network read by
$K$ prototypes and trained by $-\log\sum_k e^{-d_k}$ (`_residual_collapse.ARMS`). That
objective is at least $-\log K$, with equality exactly when every prototype sits on every
embedding ($d \equiv 0$): its optimum is collapse whatever the network does, so the arms
without a volume term (no normalization, the two LayerNorms, BatchNorm, weight decay) are
marked `by_construction` in the protocol and cast no vote; the two volume arms (log-det,
variance + decorrelation) are not decided by it and vote on C14a. Per arm and seed, on the
held-out images (`_component_use`): the distinct components in use, $\exp I(x; k)$, as a share
of $K$ (the first measure); the share of dead prototypes (mass below $0.1/K$) and the largest
component's share (alternative measures). Each rival must work on its own task (it lowers its
objective; a volume arm must keep class structure: k-NN accuracy at least 0.6).

Every negative control is realistic: the same network trained without the one mechanism the
criterion credits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from implicit_em.report.experiments._cells import interval_cell
from implicit_em.report.experiments._neural import images_of, mean_std, plus_minus
from implicit_em.report.experiments._residual_ce import CE_ARMS, train_ce_arm
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


def _ce_unit(config: dict[str, Any], arm: str, seed: int) -> dict[str, Any]:
    """`train_ce_arm` of one cross-entropy arm and seed on the configuration's images."""
    return train_ce_arm(images_of(config), arm, seed, config)


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per arm and seed, LSE arms (`<arm>-seed<s>`) and cross-entropy arms
    (`ce-<arm>-seed<s>`)."""
    gpu = config.get("device", "cpu") != "cpu"
    lse = [
        Unit(f"{arm}-seed{seed}", _arm_unit, {"config": config, "arm": arm, "seed": seed}, gpu=gpu)
        for arm in config["arms"]
        for seed in config["seeds"]
    ]
    ce = [
        Unit(
            f"ce-{arm}-seed{seed}", _ce_unit, {"config": config, "arm": arm, "seed": seed}, gpu=gpu
        )
        for arm in config["ce_arms"]
        for seed in config["seeds"]
    ]
    return lse + ce


CE_READINGS = (
    "dominance",
    "largest_share",
    "effective_rank",
    "rank_start",
    "dead_dims",
    "accuracy",
    "embedding_scale",
    "loss_end",
)
"""What the cross-entropy arms' table and numbers show, per arm: `<reading>_ce_<arm>`."""


def _ce_outcome(
    config: Mapping[str, Any], results: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, list[float]], Table]:
    """The cross-entropy arms' numbers (mean and sd over seeds), samples per seed
    (`dominance_ce_<arm>`: the largest share of held-out inputs one prototype is nearest to;
    `rank_ce_<arm>`: the held-out embedding's effective rank) and table."""
    numbers: dict[str, Any] = {"ce_steps": config["ce_steps"]}
    samples: dict[str, list[float]] = {}
    rows = []
    for arm in config["ce_arms"]:
        finals = [results[f"ce-{arm}-seed{seed}"]["final"] for seed in config["seeds"]]
        for key in CE_READINGS:
            numbers[f"{key}_ce_{arm}"], numbers[f"{key}_ce_{arm}_std"] = mean_std(
                [f[key] for f in finals]
            )
        samples[f"rank_ce_{arm}"] = [f["effective_rank"] for f in finals]
        samples[f"dominance_ce_{arm}"] = [f["dominance"] for f in finals]
        numbers[f"distinct_share_ce_{arm}"] = mean_std([f["distinct_share"] for f in finals])[0]
        numbers[f"rank_ce_{arm}"] = numbers[f"effective_rank_ce_{arm}"]
        rows.append(
            (
                CE_ARMS[arm].label,
                interval_cell(samples[f"dominance_ce_{arm}"], 3),
                plus_minus([f["largest_share"] for f in finals], 3),
                interval_cell(samples[f"rank_ce_{arm}"], 1),
                plus_minus([f["rank_start"] for f in finals], 1),
                plus_minus([f["dead_dims"] for f in finals], 3),
                interval_cell([f["distinct"] for f in finals], 2),
                plus_minus([f["accuracy"] for f in finals]),
                plus_minus([f["loss_end"] for f in finals], 3),
                plus_minus([f["embedding_scale"] for f in finals], 3),
            )
        )
    table = Table(
        "Cross-entropy over distances to one prototype per class, on the held-out images (width "
        f"{config['width']}; mean and 95% interval, or mean ± sd, over {len(config['seeds'])} "
        f"seeds, after {config['ce_steps']} steps): dominance, the largest share of inputs one "
        "prototype is nearest to (the collapse; 0.1 for balanced classes told apart); the "
        "largest prototype's share of the softmax(−d) mass; the embedding's effective rank "
        "exp H(p) of its covariance spectrum, after training and at the start (shown: "
        "cross-entropy folds each class onto its prototype); dead directions: variance below "
        "1e-3 of the mean; distinct classes in use: exp of the mutual information between input "
        "and class under softmax(−d)",
        (
            "arm",
            "dominance",
            "largest mass share",
            "effective rank",
            "at the start",
            "dead directions (share)",
            "distinct classes in use",
            "test accuracy",
            "final objective (nats)",
            "feature sd",
        ),
        tuple(rows),
    )
    return numbers, samples, table


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
        numbers[f"knn_gain_{arm}"] = mean_std([f["knn"] - f["knn_untrained"] for f in finals])[0]
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
    ce_numbers, ce_samples, ce_table = _ce_outcome(config, results)
    numbers.update(ce_numbers)
    samples.update(ce_samples)
    criteria = {c.number for c in load_protocol("E19").criteria}
    return Outcome(
        numbers=numbers,
        samples={name: values for name, values in samples.items() if name in criteria},
        tables=[
            ce_table,
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
            ),
        ],
        figures=[
            Figure(
                components_figure(runs, {a: ARMS[a].label for a in arms}, k, out),
                "Distinct components in use over training (mean over seeds) and at the end "
                f"(one dot per seed); dashed: K/2 = {k // 2}",
            )
        ],
        notes=_notes(numbers, arms) + _ce_notes(numbers, config["ce_arms"]),
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


def _ce_notes(n: Mapping[str, Any], arms: list[str]) -> list[str]:
    read = "; ".join(
        f"{CE_ARMS[a].label}: dominance {n[f'dominance_ce_{a}']:.3f}, accuracy "
        f"{n[f'accuracy_ce_{a}']:.3f}, effective rank {n[f'rank_ce_{a}']:.1f} (from "
        f"{n[f'rank_start_ce_{a}']:.1f})"
        for a in arms
    )
    return [f"Cross-entropy arms on the held-out images at the end: {read}."]


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


@cache
def _ce_trained(config_key: str, arm: str, seed: int) -> dict[str, Any]:
    """`train_ce_arm` on the control configuration, trained once per process."""
    config = json.loads(config_key)
    return train_ce_arm(images_of(config), arm, seed, config)


CE_CRITERIA = {"dominance": "dominance", "rank": "effective_rank"}
"""The cross-entropy criteria `<prefix>_ce_<arm>` by prefix, with the reading each takes."""


def _ce_measure(arm: str, reading: str, plant: str | None) -> Control:
    """Per control seed, `reading` of the held-out images of the cross-entropy network trained
    as `arm`, or of its held-out embedding as `plant` replaces it."""

    def run(config: Mapping[str, Any]) -> list[float]:
        key = json.dumps(dict(config), sort_keys=True)
        trained = [_ce_trained(key, arm, seed) for seed in config["seeds"]]
        return [(t["planted"][plant] if plant else t["final"])[reading] for t in trained]

    says = {
        "point": "its held-out embedding shrunk to a hundredth of its spread around its mean "
        "(every input mapped near one point: the collapse planted)",
        "whitened": "its held-out embedding whitened (every direction the same variance)",
    }
    if plant:
        return Control(f"the trained network ({CE_ARMS[arm].label}), {says[plant]}", run)
    return Control(f"realistic: the same network trained as {CE_ARMS[arm].label}", run)


CE_NEGATIVE = {"bare": "log_det", "log_det": "bare"}
"""Each cross-entropy criterion's realistic negative: for the bare network's collapse the same
network with the log-det added, for the log-det's volume the bare network. The positive control
reads that same trained network with its held-out embedding planted (every input near one point
for the collapse, whitened for the volume). The patched arms have no criterion: with no collapse
of the bare network to patch, no realistic negative control could come out."""


def _controls() -> dict[str, Controls]:
    out = {}
    for criterion in load_protocol("E19").criteria:
        if "_ce_" in criterion.number:
            prefix, arm = criterion.number.split("_ce_")
            reading, plant = CE_CRITERIA[prefix], "point" if prefix == "dominance" else "whitened"
            out[criterion.number] = Controls(
                positive=_ce_measure(CE_NEGATIVE[arm], reading, plant),
                negative=_ce_measure(CE_NEGATIVE[arm], reading, None),
            )
            continue
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
        "Trained by cross-entropy over distances without normalization, a residual network "
        "collapses in §6.2's sense: its inputs mapped near one point, one prototype nearest to "
        "at least half of them; an explicit log-det volume term keeps its embedding's volume "
        "(effective rank above the number of classes). Under the LSE objective alone the same "
        "arms are shown: there collapse is the objective's optimum whatever the layer does."
    ),
    setup=(
        "Fashion-MNIST; a pre-norm residual MLP (input projection, residual blocks "
        "x + W2 GELU(W1 N(x)), final N). Cross-entropy arms: read by one prototype per class "
        "(placed on the class means of a batch's embeddings) through squared Euclidean "
        "distances, trained by Adam on the cross-entropy of the labels under softmax(−d): "
        "without normalization; with LayerNorm (affine) or BatchNorm; with AdamW weight decay "
        "0.1; with 0.1 × −log det(Cov_b e / mean variance + 1e-4 I) of the batch's embeddings. "
        "Read on the test images: the dominance (the largest share of inputs one prototype is "
        "nearest to), the embedding's effective rank (exp of the entropy of its covariance "
        "spectrum) and the test accuracy. LSE arms (unlabelled): read by K = 16 "
        "prototypes initialized on the embeddings of 16 training images, trained on "
        "−log Σ_k exp(−d_k): without normalization; with LayerNorm (affine), LayerNorm "
        "without affine, BatchNorm, or LayerNorm with AdamW weight decay 0.1; with LayerNorm "
        "plus the log-det −log det(Cov_b d + 1e-4 I) of the batch's distances, or its "
        "variance and decorrelation surrogates. Read on the test images: the distinct "
        "components in use (exp of the input–component mutual information), dead prototypes "
        "(mass < 0.1/K), the largest component's share, and the embedding's 10-NN accuracy."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("dominance_ce_bare", "rank_ce_bare", "rank_ce_log_det"),
    meaning={
        "holds": (
            "Trained by cross-entropy, the network without normalization collapses (one "
            "prototype takes most inputs), and the log-det keeps its embedding's volume."
        ),
        "partly": (
            "One reading holds and one does not: the criteria not met name it (typically the "
            "network without normalization did not collapse: the labels keep the classes "
            "apart)."
        ),
        "fails": (
            "No arm reads as the paper says: the network without normalization did not "
            "collapse and the log-det did not keep more directions than the classes need."
        ),
    },
    minutes={"smoke": 0.3, "quick": 0.8, "full": 75.0},
    controls=CONTROLS,
)

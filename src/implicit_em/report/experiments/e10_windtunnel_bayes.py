"""E10 (C11, R3): does the transformer match the Bayes posterior, and does each MLP control fail?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.figures import new_figure, save
from implicit_em.report.judging import Criterion, Gate, Rule
from implicit_em.report.registry import Experiment, Figure, Outcome, Table

MODELS = ("transformer", "mlp-prefix", "mlp-pos")


def run(config: dict[str, Any], out: Path) -> Outcome:
    base = wt.base_config(config)
    task = base.make_task()
    floor = task.context_free_bits
    results = wt.grid(config, out, MODELS, ("ce",))
    mae = {m: wt.seed_mean(results, m, "ce", "bits_mae") for m in MODELS}
    kl = {m: wt.seed_mean(results, m, "ce", "kl_bits") for m in MODELS}
    params = {m: results[(m, "ce", config["seeds"][0])]["n_parameters"] for m in MODELS}
    wall = sum(r["wall_time_s"] for r in results.values())

    fig, axes = new_figure(ncols=2, width=5.6, height=3.8)
    first = {m: results[(m, "ce", config["seeds"][0])] for m in MODELS}
    for ax, key, title in zip(
        axes[0],
        ("entropy_mae", "kl"),
        ("|H(model) − H(posterior)| (bits)", "KL(posterior ‖ model) (bits)"),
        strict=True,
    ):
        for model in MODELS:
            ax.plot(
                *wt.supervised(first[model]["per_position"][key]),
                marker="o",
                ms=3,
                label=wt.MODEL_NAMES[model],
            )
        ax.plot(
            *wt.floor_per_position(first["transformer"], task.n_symbols),
            "k--",
            label="context-free floor",
        )
        ax.set_yscale("log")
        ax.set_xlabel("position (keys)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    figure = save(fig, out, "positions.png")

    rows = tuple(
        (
            wt.MODEL_NAMES[m],
            params[m],
            round(mae[m], 5),
            round(kl[m], 5),
            round(mae[m] / floor, 4),
        )
        for m in MODELS
    )

    def per_seed(model: str, key: str = "bits_mae") -> list[float]:
        return [results[(model, "ce", seed)][key] for seed in config["seeds"]]

    samples = {
        "transformer_over_floor": [v / floor for v in per_seed("transformer")],
        "mlp_prefix_over_transformer": [
            wt.ratio(p, t)
            for p, t in zip(per_seed("mlp-prefix"), per_seed("transformer"), strict=True)
        ],
    }
    numbers = {
        "mlp_pos_floor_relative_gap": abs(mae["mlp-pos"] - floor) / floor,
        "transformer_bits_mae": mae["transformer"],
        "transformer_kl_bits": kl["transformer"],
        "mlp_prefix_bits_mae": mae["mlp-prefix"],
        "mlp_pos_bits_mae": mae["mlp-pos"],
        "mlp_prefix_kl_bits": kl["mlp-prefix"],
        "mlp_pos_kl_bits": kl["mlp-pos"],
        "context_free_floor_bits": floor,
        "transformer_over_floor": mae["transformer"] / floor,
        "mlp_pos_floor_gap": abs(mae["mlp-pos"] - floor),
        "mlp_pos_over_transformer": wt.ratio(mae["mlp-pos"], mae["transformer"]),
        "mlp_prefix_over_transformer": wt.ratio(mae["mlp-prefix"], mae["transformer"]),
        "n_parameters_transformer": params["transformer"],
        "n_parameters_mlp_prefix": params["mlp-prefix"],
        "n_parameters_mlp_pos": params["mlp-pos"],
        "n_symbols": task.n_symbols,
        "n_pairs": task.length,
        "steps": base.steps,
        "seeds": list(config["seeds"]),
        "training_seconds": wall,
    }
    notes = [
        f"The position-wise MLP sits {numbers['mlp_pos_floor_gap']:.4f} bits from its analytic "
        f"floor ({mae['mlp-pos']:.4f} against {floor:.4f} bits): it cannot read the context, "
        "and that floor is all the published MLP figure (1.85 bits, the with-replacement floor) "
        "measures.",
        f"The prefix MLP, which sees the whole prefix with the same parameter count, reaches "
        f"{mae['mlp-prefix']:.4f} bits: {numbers['mlp_prefix_over_transformer']:.1f}× the "
        f"transformer's {mae['transformer']:.4f} bits and "
        f"{mae['mlp-prefix'] / floor:.1%} of the context-free floor.",
    ]
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                f"Bijection V = {task.n_symbols}, L = {task.length}, sampled answers, CE "
                f"(mean over seeds {list(config['seeds'])}); floor = {floor:.4f} bits",
                ("model", "parameters", "bits MAE", "KL bits", "MAE / floor"),
                rows,
            )
        ],
        figures=[
            Figure(
                figure,
                "Error per key position (first seed) of the three capacity-matched models; the "
                "dashed line is the error of the best prediction that ignores the context.",
            )
        ],
        notes=notes,
    )


EXPERIMENT = Experiment(
    id="E10",
    title="Wind tunnel: the transformer against Bayes, and two MLP controls",
    claims=("C11", "R3"),
    hypothesis=(
        "Trained on sampled answers, the transformer's predictions reach the exact Bayes "
        "posterior of bijection elimination, while capacity-matched MLPs fail: the "
        "position-wise MLP at its context-free floor, and the prefix MLP as well if C11's "
        "'MLPs fail' holds for MLPs that can read the context."
    ),
    setup=(
        "Bijection elimination with separate key and value tokens (V symbols, L = V − 1 "
        "pairs, keys without replacement), trained with cross-entropy on the sampled value "
        "as in the reference protocol; a transformer (RMSNorm), a prefix MLP (sees the "
        "concatenated prefix) and a position-wise MLP (embeddings and residual MLP blocks, "
        "no mixing across positions), both matched to the transformer's parameter count. "
        "Errors in bits on held-out sequences against the exact posterior. Quick size: "
        "V = 6, 2 layers × 32, 600 steps, three seeds; full: the reference-cpu preset "
        "(V = 20, L = 19), five seeds."
    ),
    rule=Rule(
        criteria=(
            Criterion(
                "transformer_over_floor",
                "<=",
                0.1,
                "the transformer's error is at most 10% of the context-free floor: it "
                "computes the posterior from the context",
                claim="C11",
                direction="supports",
                how_it_could_fail="at a small budget the transformer could stop short of the "
                "elimination rule and sit between the floor and the posterior",
            ),
            Criterion(
                "mlp_prefix_over_transformer",
                ">=",
                10,
                "the prefix MLP, which can read the context, fails by at least 10× the "
                "transformer's error",
                claim="C11",
                direction="supports",
                how_it_could_fail="a capacity-matched MLP that sees the whole prefix can learn "
                "the same posterior; its error would then be near the transformer's",
            ),
        ),
        gates=(
            Gate(
                "mlp_pos_floor_relative_gap",
                "<=",
                0.05,
                "the position-wise MLP (blind to the context) trained to its analytic "
                "context-free floor, within 5%",
            ),
        ),
    ),
    run=run,
    configs=wt.CONFIGS,
    headline=(
        "transformer_bits_mae",
        "mlp_prefix_bits_mae",
        "mlp_pos_bits_mae",
        "context_free_floor_bits",
    ),
    meaning={
        "holds": (
            "The transformer reaches the posterior and both MLP controls, even the one that "
            "reads the whole prefix, stay an order of magnitude away: C11's contrast stands "
            "with the stronger control. It is still a contrast between architectures; it "
            "does not show that the Bayesian behaviour is a *necessary* consequence of the "
            "objective (R3)."
        ),
        "partly": (
            "Only part of C11's contrast stands. Typically: the transformer reaches the "
            "posterior (the position-wise MLP sits at its analytic floor, a gate), but the "
            "prefix MLP, which can read the context, also gets close to Bayes. The MLP failure in "
            "C11's evidence is then the position-wise control's blindness to the context "
            "(its error is exactly the context-free floor), not a failure of MLPs to compute "
            "posteriors; and the Bayesian behaviour is reached by an MLP trained on the same "
            "objective, which says nothing for or against 'necessary consequence' (R3)."
        ),
        "fails": (
            "The transformer does not reach the posterior at this budget, and the prefix MLP "
            "does not fall behind it by an order of magnitude: C11's evidence is not reproduced."
        ),
    },
    minutes={"smoke": 0.2, "quick": 1.3, "full": 45.0},
)

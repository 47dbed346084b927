"""E10 (C11, R3): on three tasks, does the transformer reach the exact posterior, and the MLPs not?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.figures import new_figure, save
from implicit_em.report.judging import Criterion
from implicit_em.report.registry import Experiment, Figure, Outcome, Table
from implicit_em.report.units import unit

MODELS = ("transformer", "mlp-prefix", "mlp-pos")
FLOOR_SHARE = 0.05
"""The transformer's KL must lie below this share of the context-free floor."""
MLP_RATIO = 10.0
"""C11's contrast: the prefix MLP's KL at least this many times the transformer's."""
MLP_CLOSE = 0.1
"""R3's reading: the prefix MLP closes all but this share of the floor."""


def _units(config: dict[str, Any], out: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """Per task and seed, the summaries of the three models' runs (one unit each)."""
    units: dict[str, dict[int, dict[str, Any]]] = {task: {} for task in wt.TASKS}
    cells = {
        (task, seed): [
            wt.task_config(config, task, seed=seed, model=m, **wt.budget(config["e10"], m, task))
            for m in MODELS
        ]
        for task in wt.TASKS
        for seed in config["e10"]["seeds"]
    }
    with wt.pool(config) as workers:
        wt.train_all(config, out, [c for configs in cells.values() for c in configs], workers)
        for (task, seed), configs in cells.items():

            def compute(configs: list = configs) -> dict[str, Any]:
                runs = wt.train(config, out, configs, workers)
                return dict(zip(MODELS, runs, strict=True))

            units[task][seed] = unit(f"{task}-seed{seed}", compute)
    return units


def _samples(units: dict[str, dict[int, dict[str, Any]]]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    for task, by_seed in units.items():

        def kl(model: str, by_seed: dict = by_seed) -> list[float]:
            return wt.per_seed(by_seed, lambda u: u[model]["kl_bits"])

        floor = wt.per_seed(by_seed, lambda u: u["transformer"]["uniform_kl_bits"])
        tf, prefix, pos = kl("transformer"), kl("mlp-prefix"), kl("mlp-pos")
        z = list(zip(tf, prefix, pos, floor, strict=True))
        samples[f"{task}_transformer_over_floor"] = [t / f for t, _, _, f in z]
        samples[f"{task}_prefix_over_transformer"] = [wt.ratio(p, t) for t, p, _, _ in z]
        samples[f"{task}_prefix_over_floor"] = [p / f for _, p, _, f in z]
        samples[f"{task}_pos_over_transformer"] = [wt.ratio(q, t) for t, _, q, _ in z]
    return samples


def _gates(units: dict[str, dict[int, dict[str, Any]]]) -> dict[str, float]:
    runs = [r for by_seed in units.values() for u in by_seed.values() for r in u.values()]
    bijection = list(units["bijection"].values())
    return {
        "unconverged_runs": float(sum(not r["converged"] for r in runs)),
        "bijection_floor_identity_gap": max(
            abs(u["transformer"]["uniform_kl_bits"] - u["transformer"]["context_free_bits"])
            for u in bijection
        ),
        "bijection_pos_floor_gap": max(
            abs(u["mlp-pos"]["kl_bits"] / u["mlp-pos"]["context_free_bits"] - 1) for u in bijection
        ),
    }


def _figure(units: dict[str, dict[int, dict[str, Any]]], out: Path) -> str:
    fig, axes = new_figure(ncols=len(wt.TASKS), width=4.2, height=3.6)
    for ax, task in zip(axes[0], wt.TASKS, strict=True):
        first = units[task][min(units[task])]
        for model in MODELS:
            ax.plot(
                *wt.supervised(first[model]["per_position_kl"]),
                marker="o",
                ms=2,
                label=wt.MODEL_NAMES[model],
            )
        ax.set_yscale("log")
        ax.set_xlabel("supervised position")
        ax.set_title(f"{wt.TASK_NAMES[task]}: KL (bits)")
        ax.legend(fontsize=7)
    return save(fig, out, "positions.png")


def run(config: dict[str, Any], out: Path) -> Outcome:
    units = _units(config, out)
    samples = _samples(units)
    numbers: dict[str, Any] = dict(_gates(units))
    rows = []
    for task in wt.TASKS:
        by_seed = units[task]
        floor = wt.per_seed(by_seed, lambda u: u["transformer"]["uniform_kl_bits"])
        for model in MODELS:

            def read(key: str, model: str = model, by_seed: dict = by_seed) -> list[float]:
                return wt.per_seed(by_seed, lambda u: u[model][key])

            kl = read("kl_bits")
            numbers[f"{task}_{model.replace('-', '_')}_kl_bits"] = sum(kl) / len(kl)
            rows.append(
                (
                    wt.TASK_NAMES[task],
                    wt.MODEL_NAMES[model],
                    int(read("n_parameters")[0]),
                    wt.interval_text(kl),
                    wt.interval_text(read("bits_mae")),
                    wt.interval_text([k / f for k, f in zip(kl, floor, strict=True)]),
                    "—"
                    if model == "transformer"
                    else wt.interval_text(
                        samples[
                            f"{task}_{'prefix' if model == 'mlp-prefix' else 'pos'}_over_transformer"
                        ]
                    ),
                    wt.converged_text([by_seed[sd][model] for sd in sorted(by_seed)]),
                    round(sum(read("steps")) / len(kl)),
                )
            )
        numbers[f"{task}_floor_bits"] = sum(floor) / len(floor)
    wall = sum(
        r["wall_time_s"] for by_seed in units.values() for u in by_seed.values() for r in u.values()
    )
    numbers |= {"seeds": list(config["e10"]["seeds"]), "training_seconds": wall}
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                f"KL to the exact posterior per supervised position (bits), mean over seeds "
                f"{list(config['e10']['seeds'])} with its 95% t interval; entropy MAE beside it; the floor "
                "is the KL of the uniform prediction (context-free)",
                (
                    "task",
                    "model",
                    "parameters",
                    "KL (bits)",
                    "entropy MAE (bits)",
                    "KL / floor",
                    "KL / transformer's",
                    "converged (largest fall, % of floor)",
                    "steps",
                ),
                tuple(rows),
            )
        ],
        figures=[
            Figure(
                _figure(units, out),
                "Held-out KL per supervised position (first seed) of the three capacity-matched "
                "models on each task.",
            )
        ],
        notes=[
            f"{task}: transformer {numbers[f'{task}_transformer_kl_bits']:.3g} bits, prefix MLP "
            f"{numbers[f'{task}_mlp_prefix_kl_bits']:.3g}, position-wise MLP "
            f"{numbers[f'{task}_mlp_pos_kl_bits']:.3g}, uniform floor "
            f"{numbers[f'{task}_floor_bits']:.3g} (means over seeds)."
            for task in wt.TASKS
        ],
    )


def _criteria(task: str) -> tuple[Criterion, ...]:
    name = wt.TASK_NAMES[task]
    return (
        Criterion(
            f"{task}_transformer_over_floor",
            "<",
            FLOOR_SHARE,
            f"{name}: the transformer's KL is below {FLOOR_SHARE:.0%} of the floor (the uniform "
            "prediction's KL)",
            claim="C11",
            direction="supports",
            how_it_could_fail="a transformer of this size and budget can plateau well above Bayes",
        ),
        Criterion(
            f"{task}_prefix_over_transformer",
            ">=",
            MLP_RATIO,
            f"{name}: the prefix MLP, which reads the whole context with the same parameter "
            f"count, has at least {MLP_RATIO:g}x the transformer's KL (C11's 'MLPs fail')",
            claim="C11",
            direction="supports",
            how_it_could_fail="an MLP that sees the prefix can learn the posterior too; then the "
            "ratio is near 1",
        ),
        Criterion(
            f"{task}_prefix_over_floor",
            "<=",
            MLP_CLOSE,
            f"{name}: the prefix MLP closes at least {1 - MLP_CLOSE:.0%} of the floor, so the "
            "MLP failure C11 cites is the context-free control's blindness, not a failure of "
            "MLPs to compute posteriors",
            claim="R3",
            direction="supports",
            how_it_could_fail="the prefix MLP can stay near the floor, as C11's MLP control does",
        ),
    )


EXPERIMENT = Experiment(
    id="E10",
    title="Wind tunnel: the transformer against Bayes on three tasks, and two MLP controls",
    claims=("C11", "R3"),
    hypothesis=(
        f"On every task the converged transformer's KL to the exact posterior is below "
        f"{FLOOR_SHARE:.0%} of the context-free floor, while the capacity-matched prefix MLP "
        f"stays at least {MLP_RATIO:g}x worse (C11); R3 reads the same runs the other way: if "
        f"the prefix MLP closes {1 - MLP_CLOSE:.0%} of the floor, the published MLP failure is "
        "the context-free control's, and says nothing of necessity."
    ),
    setup=(
        "Three tasks with exact posteriors: bijection elimination (separate key and value "
        "tokens, keys without replacement, sampled answers as targets), HMM filtering (matrices "
        "on a grid as tokens, the exact filter as target) and dice counting (Laplace's rule). "
        "Per task, a transformer (RMSNorm), a prefix MLP (sees the concatenated prefix) and a "
        "position-wise MLP (no mixing across positions), matched in parameter count, trained "
        "with cross-entropy under warmup-stable-decay: the rate is held to 80% of the budget, "
        "where each run is gated on the plateau rule (the mean held-out KL of the last 20% of "
        "the steps so far fell by under 2%, or under 0.5% of the floor, from the 20% before), "
        "then "
        "decays linearly to zero. Judged on the mean KL per supervised position in bits, over seeds with 95% t "
        "intervals; the floor is the KL of the uniform prediction (the analytic context-free "
        "floor on the bijection; on the HMM and the dice, where the current token is "
        "informative, an upper bound of the context-free error). Quick: the smallest tasks "
        "(bijection V = 4, L = 3; HMM 2 x 2, T = 4; dice K = 2, T = 6), 1 x 32 transformer, "
        "2,250 steps judged at 1,800 (the bijection 4,050 judged at 3,240; the position-wise "
        "MLP, at its floor within a few hundred, 600); full: the reference-cpu preset (bijection V = 20, L = 19; HMM 5 x 5, "
        "T = 20; dice K = 3, T = 24), 4,000 steps (position-wise MLP 1,000; the bijection's "
        "prefix MLP 16,000; the HMM transformer 8,000); 3 seeds at both sizes."
    ),
    run=run,
    headline=(
        "bijection_transformer_kl_bits",
        "bijection_mlp_prefix_kl_bits",
        "hmm_transformer_kl_bits",
        "dice_transformer_kl_bits",
    ),
    meaning={
        "holds": (
            "On every task the transformer reaches the posterior and the prefix MLP stays an "
            "order of magnitude behind, yet also closes most of the floor: C11's contrast stands "
            "with the stronger control, and R3's reading too. It is a contrast between "
            "architectures; it does not show that the behaviour is a necessary consequence of the "
            "objective."
        ),
        "partly": (
            "Only some statements hold. Typically the transformer reaches the posterior, and the "
            "prefix MLP, which can read the context, gets close to it as well: C11's 'MLPs fail' "
            "is then the position-wise control's blindness to the context, and R3 stands."
        ),
        "fails": (
            "The transformer does not reach the posterior at this budget on any task, the prefix "
            "MLP is not an order of magnitude behind, and it does not close the floor either."
        ),
    },
    minutes={"smoke": 1.0, "quick": 1.7, "full": 27.0},
)

r"""E12 (C12): does the routing settle before the values? Excess KL of freezing one part, and the
attention maps' own timescales.

From a run at a constant learning rate, at each freeze step $t$ two branches train to the same
end: the routing (query and key projections) frozen, or the rest (values, output projections,
MLPs, embeddings, norms, head) frozen. Freezing a part that has settled costs nothing: the
branch ends where the full run does. The cost of freezing part $P$ at $t$ is its excess KL over
the full run's, $c_P(t) = K_P(t) - K_T$ (bits), and C12 predicts that the routing settles first:

$$
g(t) = \frac{c_\text{rest}(t) - c_\text{routing}(t)}{F} = \frac{K_\text{rest}(t) - K_\text{routing}(t)}{F} > 0,
$$

with $F$ the floor (the uniform prediction's KL), at an early, a middle and a late freeze step.
The attention maps give the routing's own timescales, read from weight snapshots on a fixed
probe batch: the step from which at least 90% of the attention rows keep the argmax they have at
the end, and the step from which the mean row entropy stays within 10% of its net change of its
final value; beside them, the step from which the held-out KL stays within 10% of its net fall
of its final value.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from implicit_em.report.experiments import _sticky_reference as sticky
from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table
from implicit_em.windtunnel.checkpoint import load_plain, save_atomic
from implicit_em.windtunnel.cli import run_dir
from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.evaluation import held_out
from implicit_em.windtunnel.interventions import run_interventions
from implicit_em.windtunnel.timescales import attention_maps, settling_step
from implicit_em.windtunnel.train import CHECKPOINT, SNAPSHOTS, state_path
from implicit_em.windtunnel.train import run as train_run

POINTS = ("early", "mid", "late")
"""The names of the three freeze steps, in order (the protocol's `freeze_at`)."""
SETTLED = 0.1
"""A series has settled from the step where it stays within this share of its net change."""


def base_run(config: dict[str, Any], seed: int) -> RunConfig:
    """E12's run: E10's transformer on the size's `e12.task` (the HMM filter) with split
    projections at a constant rate, to a fixed length (its interventions compare runs of equal
    length)."""
    e12 = config["e12"]
    return wt.task_config(
        config,
        e12["task"],
        model="transformer",
        split_qkv=True,
        schedule="constant",
        steps=e12["steps"],
        stop_at_plateau=False,
        min_steps=0,
        seed=seed,
    )


def routing_at_init(base: RunConfig) -> RunConfig:
    """The routing-necessity run: `base` with its query/key projections frozen at their
    initialization (from step 0), the rest training to the same end."""
    return replace(base, freeze="routing", freeze_at=0)


def cost_gap(kl_routing_frozen: float, kl_rest_frozen: float, floor: float) -> float:
    """(K_rest(t) − K_routing(t)) / F: the excess KL of freezing the rest at a step, less that
    of freezing the routing, as a share of the floor (see the module)."""
    return (kl_rest_frozen - kl_routing_frozen) / floor


def attention_timescales(run: RunConfig, directory: Path, probe_size: int) -> dict[str, Any]:
    """From a run's weight snapshots: per snapshot step, the share of attention rows (queries
    with at least two keys, every layer and head, on the first `probe_size` held-out sequences)
    whose argmax is the final one, and the mean row entropy (bits); with their settling steps."""
    snapshots = load_plain(directory / SNAPSHOTS)
    model = build_model(replace(run, sdpa=False), run.make_task())
    probe = held_out(run).tokens[:probe_size]
    agreement, entropy, final = [], [], None
    for state in reversed(snapshots["states"]):
        model.load_state_dict(state)
        alpha = torch.stack([a for a in attention_maps(model, probe)])[..., 1:, :]
        top = alpha.argmax(-1)
        final = top if final is None else final
        agreement.append(float((top == final).double().mean()))
        row = -(alpha * alpha.clamp_min(1e-300).log2()).sum(-1)
        entropy.append(float(row.mean()))
    steps = list(snapshots["steps"])
    agreement, entropy = agreement[::-1], entropy[::-1]
    net = abs(entropy[0] - entropy[-1]) or 1.0
    return {
        "steps": steps,
        "argmax_agreement": agreement,
        "entropy_bits": entropy,
        "t_argmax": settling_step(steps, [1 - a for a in agreement], SETTLED),
        "t_entropy": settling_step(steps, [abs(h - entropy[-1]) / net for h in entropy], SETTLED),
    }


def kl_settling_step(history: dict[str, list[float]]) -> int:
    """The step from which the held-out KL stays within `SETTLED` of its net fall of its final
    value."""
    steps, kl = history["eval_step"], history["eval_kl"]
    net = abs(kl[0] - kl[-1]) or 1.0
    return settling_step(steps, [abs(k - kl[-1]) / net for k in kl], SETTLED)


def done_by(history: dict[str, list[float]], steps: list[int]) -> list[float]:
    """The share of the run's held-out KL improvement reached at each of `steps`,
    $(K_0 - K_t) / (K_0 - K_T)$, with $K_t$ read at the last evaluation at or before $t$."""
    pairs = list(zip(history["eval_step"], history["eval_kl"], strict=True))
    first, last = history["eval_kl"][0], history["eval_kl"][-1]
    if first == last:
        return [math.nan for _ in steps]
    return [(first - [k for s, k in pairs if s <= t][-1]) / (first - last) for t in steps]


def _interventions_unit(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """One seed: the interventions of the constant-rate run and its timescales."""
    e12 = config["e12"]
    base = base_run(config, seed)
    keep = {"snapshot_every": e12["snapshot_every"], "states_at": list(e12["freeze_at"])}
    with wt.unit_folder() as out, wt.pool(config) as workers:
        wt.train_all(config, out, [base], workers, **keep)
        found = run_interventions(
            base,
            e12["freeze_at"],
            wt.runs_dir(config, out),
            config["label"],
            device=config.get("device", "cpu"),
            snapshot_every=e12["snapshot_every"],
            pool=workers,
        )
        (full,) = wt.train(config, out, [base], workers, **keep)
        (frozen,) = wt.train(config, out, [routing_at_init(base)], workers)
        directory = run_dir(wt.runs_dir(config, out), base, config["label"])
        history = json.loads((directory / "result.json").read_text())["history"]
        return {
            **{k: found[k] for k in ("kl_initial", "kl_full", "freeze_at")},
            **{f"kl_{p}_frozen": found[f"kl_{p}_frozen"] for p in ("routing", "rest")},
            "kl_routing_at_init": frozen["kl_bits"],
            **{k: full[k] for k in ("converged", "plateau_fall_floor", "uniform_kl_bits")},
            "attention": attention_timescales(base, directory, e12["probe"]),
            "t_kl": kl_settling_step(history),
            "t90_weights": found["t90"],
            "done_by": done_by(history, e12["freeze_at"]),
        }


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per seed (the constant-rate run, its interventions and timescales), and one
    per seed of the reference arm (the sticky chain, values at 1x and at 10x the rate)."""
    threads = config.get("workers", 1)
    args = [{"config": config, "seed": seed} for seed in config["seeds"]]
    return [
        *(Unit(f"interventions-seed{a['seed']}", _interventions_unit, a, threads) for a in args),
        *(Unit(f"sticky-seed{a['seed']}", sticky.sticky_unit, a, threads) for a in args),
    ]


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    units = {seed: results[f"interventions-seed{seed}"] for seed in config["seeds"]}
    sticky_units = {seed: results[f"sticky-seed{seed}"] for seed in config["seeds"]}
    freeze_at = config["e12"]["freeze_at"]
    samples = {
        f"cost_gap_{name}": wt.per_seed(
            units,
            lambda u, i=i: cost_gap(
                u["kl_routing_frozen"][i], u["kl_rest_frozen"][i], u["uniform_kl_bits"]
            ),
        )
        for i, name in enumerate(POINTS)
    }

    def cost(part: str, i: int) -> list[float]:
        return wt.per_seed(units, lambda u: u[f"kl_{part}_frozen"][i] - u["kl_full"])

    def done(i: int) -> list[float]:
        return wt.per_seed(units, lambda u: u["done_by"][i])

    timescale = {
        "attention argmax (90% of rows final)": wt.per_seed(
            units, lambda u: u["attention"]["t_argmax"]
        ),
        "attention entropy (within 10%)": wt.per_seed(units, lambda u: u["attention"]["t_entropy"]),
        "held-out KL (within 10% of its fall)": wt.per_seed(units, lambda u: u["t_kl"]),
        **{
            f"{part} weights (within 10% of their displacement)": wt.per_seed(
                units, lambda u, part=part: u["t90_weights"][part]
            )
            for part in ("routing", "values")
        },
    }
    numbers: dict[str, Any] = {
        "unconverged_runs": float(sum(not u["converged"] for u in units.values())),
        "kl_gain_min": min(
            (u["kl_initial"] - u["kl_full"]) / u["kl_initial"] for u in units.values()
        ),
        "routing_init_cost_bits": float(
            np.mean([u["kl_routing_at_init"] - u["kl_full"] for u in units.values()])
        ),
        "freeze_at": list(freeze_at),
        "final_kl": float(np.mean([u["kl_full"] for u in units.values()])),
        "t_attention_argmax": float(np.mean(timescale["attention argmax (90% of rows final)"])),
        "t_attention_entropy": float(np.mean(timescale["attention entropy (within 10%)"])),
        "t_kl": float(np.mean(timescale["held-out KL (within 10% of its fall)"])),
        **{
            f"t_{part}_weights": float(np.mean([u["t90_weights"][part] for u in units.values()]))
            for part in ("routing", "values")
        },
        "steps": config["e12"]["steps"],
        "seeds": list(config["seeds"]),
    }
    for name, values in samples.items():
        numbers[name] = float(np.mean(values))
    numbers |= sticky.sticky_summary(config, sticky_units)
    intervention_rows = tuple(
        (
            f"{POINTS[i]} (t = {t})",
            wt.interval_text(done(i)),
            wt.interval_text(cost("routing", i)),
            wt.interval_text(cost("rest", i)),
            wt.interval_text(samples[f"cost_gap_{POINTS[i]}"]),
        )
        for i, t in enumerate(freeze_at)
    )
    timescale_rows = tuple((name, wt.interval_text(v)) for name, v in timescale.items())
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                "Freezing one part at step t, the other training on to step "
                f"{config['e12']['steps']} at the constant rate: the excess held-out KL over the "
                "full run's (bits), and its gap as a share of the floor (mean and 95% t interval "
                f"over seeds {list(config['seeds'])}). 'Done by t' is the share of the full run's "
                "KL improvement already reached at step t, (K₀ − K_t) / (K₀ − K_T).",
                (
                    "freeze step",
                    "done by t",
                    "cost of freezing the routing (bits)",
                    "cost of freezing the rest (bits)",
                    "gap / floor (criterion)",
                ),
                intervention_rows,
            ),
            Table(
                "Routing necessity: the excess held-out KL over the full run's (bits) when the "
                "query/key projections stay at their initialization for the whole run (C12 is "
                "read only where this cost is at least 0.01 bits; else C12 is not testable on "
                "this task)",
                ("run", "excess KL (bits)"),
                (
                    (
                        "routing frozen at initialization",
                        wt.interval_text(
                            wt.per_seed(units, lambda u: u["kl_routing_at_init"] - u["kl_full"])
                        ),
                    ),
                ),
            ),
            Table(
                "Reference arm: steps to converge on the sticky Markov chain (8 symbols, "
                "self-transition 0.3), the values at 1x or at "
                f"{config['e12']['sticky']['value_lr_mult']:g}x the routing's rate; the "
                "reference's published numbers (6 x 192 transformer, 5 seeds) beside ours "
                f"(seeds {list(config['seeds'])})",
                ("arm", "reference", "ours"),
                sticky.sticky_rows(config, numbers, len(sticky_units)),
            ),
            Table(
                "Timescales read from the attention maps (weight snapshots on a fixed probe batch) "
                "and from the held-out KL (steps; mean and 95% t interval)",
                ("series", "settled from step"),
                timescale_rows,
            ),
        ],
        figures=[_figure(units, out)],
        notes=[
            f"Final KL at the constant rate {numbers['final_kl']:.3g} bits (mean over seeds); "
            "the full runs' plateau rule at their end: "
            f"{wt.converged_text([units[s] for s in sorted(units)])}.",
        ],
    )


def _figure(units: dict[int, dict[str, Any]], out: Path) -> Figure:
    fig, axes = new_figure(ncols=2, width=5.0, height=3.6)
    first = units[min(units)]
    attention = first["attention"]
    ax = axes[0, 0]
    ax.plot(attention["steps"], attention["argmax_agreement"], label="argmax = final")
    ax.plot(
        attention["steps"],
        [h / max(attention["entropy_bits"]) for h in attention["entropy_bits"]],
        label="entropy / its largest",
    )
    ax.set_xlabel("step (constant rate)")
    ax.set_title("attention maps (first seed)")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    freeze_at = first["freeze_at"]
    for part in ("routing", "rest"):
        means = [
            float(np.mean([u[f"kl_{part}_frozen"][i] - u["kl_full"] for u in units.values()]))
            for i in range(len(freeze_at))
        ]
        ax.plot(freeze_at, means, marker="o", label=f"{part} frozen from t")
    ax.axhline(0.0, color="k", linestyle=":")
    ax.set_xlabel("freeze step t")
    ax.set_title("excess KL over the full run (bits)")
    ax.legend(fontsize=7)
    return Figure(
        save(fig, out, "timescales.png"),
        "Left: how settled the attention maps are (first seed). Right: the excess KL of freezing "
        "the routing or the rest from step t (mean over seeds).",
    )


_CONTROL_RUNS: list[tempfile.TemporaryDirectory] = []
"""Where the controls keep their full-length runs, one folder per process: every control
branches from the same runs, trained once."""


def _control_root() -> Path:
    if not _CONTROL_RUNS:
        _CONTROL_RUNS.append(tempfile.TemporaryDirectory(prefix="e12-controls-"))
    return Path(_CONTROL_RUNS[0].name)


def _planted_gap(config: dict[str, Any], settled: str, point: int) -> list[float]:
    """The cost gap at freeze point `point` of runs whose `settled` part is planted in the state
    kept at the freeze step, then both branches train from it, as E12's interventions do.

    Every weight gets its final value except one projection, erased (zero weights and bias),
    which must be learned again: `"routing"` settled, the value projections erased (the head
    reads nothing of the context until they are relearned); `"rest"` settled, the query
    projections erased (uniform attention whatever the embeddings, which also shape the
    attention and could otherwise take the routing's place)."""
    t = config["e12"]["freeze_at"][point]
    gaps = []
    for seed in config["seeds"]:
        base = base_run(config, seed)
        directory = run_dir(_control_root(), base, config["label"])
        full = train_run(base, directory, progress=False, states_at=config["e12"]["freeze_at"])
        state = load_plain(state_path(directory, t))
        final = load_plain(directory / CHECKPOINT)["model"]
        erased = ".attn.query." if settled == "rest" else ".attn.value."
        for name, weight in final.items():
            state["model"][name] = torch.zeros_like(weight) if erased in name else weight.clone()
        planted = directory / f"planted-{settled}-{t}.pt"
        save_atomic(state, planted)
        kl = {}
        for part in ("routing", "rest"):
            branch = replace(base, freeze=part, freeze_at=t)
            where = directory / f"planted-{settled}-{t}-{part}-frozen"
            kl[part] = train_run(branch, where, progress=False, branch_from=planted)["kl_bits"]
        gaps.append(cost_gap(kl["routing"], kl["rest"], full["uniform_kl_bits"]))
    return gaps


def _control(point: int, settled: str) -> Control:
    planted = (
        "every weight final but the value projections, erased (the routing settled)"
        if settled == "routing"
        else "every weight final but the query projections, erased (the rest settled)"
    )
    return Control(
        f"at the {POINTS[point]} freeze step, {planted}",
        lambda config: _planted_gap(config, settled, point),
    )


EXPERIMENT = Experiment(
    id="E12",
    title="Wind tunnel: two timescales, read in excess KL when one part is frozen, and in the "
    "attention maps",
    claims=("C12",),
    hypothesis=(
        "C12 (attention is an E-step that settles first; the values are an M-step that keeps "
        "refining) predicts, under a constant learning rate, that freezing the attention's "
        "query/key projections costs less excess held-out KL than freezing everything else at "
        "the same step, at an early, a middle (primary) and a late freeze step."
    ),
    setup=(
        "E10's transformer on the HMM filter (where the answer depends on the order of the "
        "observations, so the attention must route; on the bijection a uniform attention "
        "suffices, since the posterior of a new key is uniform over the values not yet seen), "
        "with separate query, key and value projections, trained "
        "at a constant learning rate after warmup (no decay, so the schedule does not make "
        "things settle) to a fixed length, its training state kept at each freeze step t and "
        "its weights every few steps. From each kept state, two branches train to the same end: "
        "the routing (Q/K) frozen, or the rest (values, output projections, MLPs, embeddings, "
        "norms, head) frozen (learning rate 0: no decay either). Judged per seed on the gap "
        "(K_rest(t) − K_routing(t)) / floor, the difference of the two branches' excess KL over "
        "the full run, at three freeze steps chosen from development runs at full size (seeds "
        "7001 and 7003, not reported; the HMM transformer's held-out KL had done about 10%, 35-60% "
        "and 97% of its improvement by steps 250, 500 and 1,500): early (t = 250), middle "
        "(t = 600) and late (t = 1,500). The attention maps' timescales (argmax and "
        "entropy settling) and the held-out KL's are reported beside them. The full runs are "
        "read by E10's plateau rule at their end. Quick and full run the same task and "
        "model; quick is 20 steps with the freeze steps scaled (1, 3, 8), on fewer seeds and a "
        "smaller held-out set. Controls (on a shorter run): at the freeze step every weight is set to its "
        "final value except the value projections (positive: the routing has settled, the rest "
        "has not) or the query projections (negative), which are erased and must be learned "
        "again, through the same two branches."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("cost_gap_mid", "t_attention_argmax", "t_kl", "final_kl"),
    meaning={
        "holds": (
            "At every freeze step, freezing the routing costs less than freezing the rest: the "
            "attention settles first, as C12's E-step before M-step."
        ),
        "partly": (
            "The routing has settled first at some freeze steps and not at others: typically it "
            "is still forming early and settled later, so 'early' in C12 holds only after the "
            "attention has formed."
        ),
        "fails": (
            "At no freeze step does freezing the routing cost less than freezing the rest: on "
            "this task the attention does not settle before the values."
        ),
    },
    minutes={"smoke": 0.5, "quick": 3.2, "full": 530.0},
    controls={
        f"cost_gap_{name}": Controls(_control(i, "routing"), _control(i, "rest"))
        for i, name in enumerate(POINTS)
    },
)

"""E10's reference-budget arms: the wind tunnel trained for the reference's data budget on a CPU.

A size's `reference_budget` block (E10's protocol) names a `scale` (`reference-budget`, see
`implicit_em.windtunnel.config`), the `reference`'s budget per task (`steps` and `batch_size`
of its published runs, and its `model`), the `seeds`, `train` overrides common to every arm
(smaller sizes shrink the steps there) and the `arms`: each a `task`, a `model` and its own
`train` fields. Every arm trains to a fixed length under warmup and a cosine to zero, and is
`converged` only when the mean held-out KL of its last 20% of steps fell by less than 0.05% of
the floor from the 20% before (`evaluation.plateau`; the tolerance is in the scale's preset).

One unit per arm and seed (`ref-<arm>-seed<s>`), one run of one thread each, trained in the
size's run directory and so resumed from its last checkpoint when a report is restarted.

On each task (`JUDGED`) a transformer arm and its capacity-matched prefix MLP decide C11's
"transformers reproduce the posterior" part at the reference's budget:

* `refbudget_<task>_transformer_entropy_mae_bits`: the transformer's held-out mean absolute
  entropy error $\\frac1N\\sum |H(q) - H(p)|$ in bits per supervised position (the reference's
  own metric), per seed;
* `refbudget_<task>_prefix_minus_transformer_bits`: the prefix MLP's held-out KL less the
  transformer's, $\\mathrm{KL}(p\\|q_\\text{MLP}) - \\mathrm{KL}(p\\|q_\\text{T})$, paired by seed.

Their requirements read two numbers: `refbudget_<task>_budget_share`, the smallest ratio over the
judged arms of sequences seen to the reference's, $\\min S B / (S_\\text{ref} B_\\text{ref})$
(below 1 the arms did not run at the reference's budget: `not tested`), and
`refbudget_<task>_unconverged_runs` (a run that missed the gate: undecided).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Table
from implicit_em.windtunnel.config import RunConfig, preset

JUDGED = {"bijection": ("bijection-2x64", "bijection-prefix"), "hmm": ("hmm-4x128", "hmm-prefix")}
"""Per task, the (transformer, prefix MLP) arms the criteria read."""


ARM_COLUMNS = (
    "arm",
    "task",
    "model",
    "layers × width",
    "parameters",
    "steps × batch",
    "share of the reference's sequences",
    "KL (bits)",
    "entropy MAE (bits)",
    "converged (largest fall, % of floor)",
    "hours per seed",
)
"""The columns of E10's table of reference-budget arms (`rendering.reference_table` reads its
figures by these names)."""


def arm_config(config: dict[str, Any], arm: str, seed: int) -> RunConfig:
    """The configuration of `arm` for `seed` at a report size: the block's scale preset for
    the arm's task, the arm's `train` fields, then the block's (a smaller size's overrides)."""
    block = config["reference_budget"]
    spec = block["arms"][arm]
    fields = {**spec.get("train", {}), **block.get("train", {})}
    return preset(spec["task"], block["scale"], model=spec["model"], seed=seed, **fields)


def _arm_unit(config: dict[str, Any], arm: str, seed: int) -> dict[str, Any]:
    """The summary of one arm's run for one seed (`wt.summary`)."""
    with wt.unit_folder() as out:
        (found,) = wt.train(config, out, [arm_config(config, arm, seed)], None)
    return found


def unit_name(arm: str, seed: int) -> str:
    return f"ref-{arm}-seed{seed}"


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit of one thread per arm and seed (none when the size has no block), asking for
    a GPU when the size's device is one."""
    block = config.get("reference_budget")
    if not block:
        return []
    missing = {a for arms in JUDGED.values() for a in arms} - set(block["arms"])
    if missing:
        raise ValueError(f"reference_budget: the judged arms {sorted(missing)} are not declared")
    return [
        Unit(
            unit_name(arm, seed),
            _arm_unit,
            {"config": config, "arm": arm, "seed": seed},
            gpu=wt.on_gpu(config),
        )
        for arm in block["arms"]
        for seed in block["seeds"]
    ]


def samples(transformer: list[dict[str, float]], prefix: list[dict[str, float]]) -> dict:
    """The per-seed numbers the criteria read on one task, from each arm's held-out errors
    (`kl_bits`, `bits_mae`) per seed: the transformer's entropy error, and the prefix MLP's KL
    less the transformer's, paired by seed."""
    pairs = list(zip(transformer, prefix, strict=True))
    return {
        "transformer_entropy_mae_bits": [t["bits_mae"] for t in transformer],
        "prefix_minus_transformer_bits": [p["kl_bits"] - t["kl_bits"] for t, p in pairs],
    }


def budget_share(config: dict[str, Any], arm: str) -> float:
    """Sequences an arm's run sees over the reference's on its task, $SB / (S_r B_r)$."""
    block = config["reference_budget"]
    run = arm_config(config, arm, block["seeds"][0])
    reference = block["reference"][block["arms"][arm]["task"]]
    return run.steps * run.batch_size / (reference["steps"] * reference["batch_size"])


def read(config: dict[str, Any], results: Mapping[str, Any]) -> tuple[dict, dict, Table | None]:
    """The numbers, samples and table of the arms (empty when the size has no block)."""
    block = config.get("reference_budget")
    if not block:
        return {}, {}, None
    seeds = block["seeds"]
    runs = {a: [results[unit_name(a, s)] for s in seeds] for a in block["arms"]}
    numbers: dict[str, Any] = {}
    found: dict[str, list[float]] = {}
    for task, (transformer, prefix) in JUDGED.items():
        for name, values in samples(runs[transformer], runs[prefix]).items():
            found[f"refbudget_{task}_{name}"] = values
        numbers[f"refbudget_{task}_budget_share"] = min(
            budget_share(config, a) for a in (transformer, prefix)
        )
        numbers[f"refbudget_{task}_unconverged_runs"] = float(
            sum(not r["converged"] for a in (transformer, prefix) for r in runs[a])
        )
    rows = []
    for arm, found_runs in runs.items():
        run = arm_config(config, arm, seeds[0])
        kl = [r["kl_bits"] for r in found_runs]
        mae = [r["bits_mae"] for r in found_runs]
        key = f"refbudget_{arm.replace('-', '_')}"
        numbers[f"{key}_kl_bits"] = sum(kl) / len(kl)
        numbers[f"{key}_entropy_mae_bits"] = sum(mae) / len(mae)
        hours = [r["wall_time_s"] / 3600 for r in found_runs]
        numbers[f"{key}_hours_per_seed"] = sum(hours) / len(hours)
        rows.append(
            (
                arm,
                wt.TASK_NAMES[run.task],
                wt.MODEL_NAMES[run.model],
                f"{run.n_layer} × {run.n_embd}",
                int(found_runs[0]["n_parameters"]),
                f"{run.steps:,} × {run.batch_size}",
                f"{budget_share(config, arm):.3g}",
                wt.interval_text(kl),
                wt.interval_text(mae),
                wt.converged_text(found_runs),
                f"{numbers[f'{key}_hours_per_seed']:.3g}",
            )
        )
    table = Table(
        f"Reference-budget arms (seeds {list(seeds)}): each trained to a fixed length under "
        "warmup and a cosine to zero, judged converged when the mean held-out KL of its last 20% "
        "of steps fell by less than 0.05% of the floor; the share is its sequences (steps × "
        "batch) over the reference's on the task (bijection 100k × 128 with 6 × 192; HMM 50 "
        "epochs of 10k sequences, 7,850 × 64, with 9 × 256); held-out KL and entropy error "
        "(bits per supervised position), mean with its 95% t interval over seeds; hours of "
        "training per seed on one thread",
        ARM_COLUMNS,
        tuple(rows),
    )
    return numbers, found, table

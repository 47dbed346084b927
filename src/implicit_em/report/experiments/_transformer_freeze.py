r"""E12's transformer arm: E10's transformer on the HMM filter at a constant rate, its freeze
interventions (the routing, Q/K, frozen against the rest, every other weight), its attention
maps' timescales and the controls of its criteria.

From the run, at each freeze step $t$ two branches train to the same end: the routing (query
and key projections) frozen, or the rest (values, output projections, MLPs, embeddings, norms,
head) frozen. The cost of freezing part $P$ at $t$ is its excess KL over the full run's,
$c_P(t) = K_P(t) - K_T$ (bits), and the criterion reads

$$
g(t) = \frac{c_\text{rest}(t) - c_\text{routing}(t)}{F} = \frac{K_\text{rest}(t) - K_\text{routing}(t)}{F},
$$

with $F$ the floor (the uniform prediction's KL). "The rest" is every weight but Q/K, so $g$
compares the routing with everything else at once, not with the values alone (the one-head
lag arm, `_one_part_freeze`, moves one part at a time). The attention maps give the routing's
own timescales, read from weight snapshots on a fixed probe batch: the step from which at least
90% of the attention rows keep the argmax they have at the end, and the step from which the
mean row entropy stays within 10% of its net change of its final value; beside them, the step
from which the held-out KL stays within 10% of its net fall of its final value.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from implicit_em.report.experiments import _windtunnel as wt
from implicit_em.report.judging.controls import Control
from implicit_em.windtunnel.checkpoint import load_plain, save_atomic
from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.evaluation import held_out
from implicit_em.windtunnel.interventions import run_interventions
from implicit_em.windtunnel.run_dirs import run_dir
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


def interventions_unit(config: dict[str, Any], seed: int) -> dict[str, Any]:
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


def control(point: int, settled: str) -> Control:
    planted = (
        "every weight final but the value projections, erased (the routing settled)"
        if settled == "routing"
        else "every weight final but the query projections, erased (the rest settled)"
    )
    return Control(
        f"at the {POINTS[point]} freeze step, {planted}",
        lambda config: _planted_gap(config, settled, point),
    )

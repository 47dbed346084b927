r"""Train one wind-tunnel configuration, with checkpoints, resumption and a JSON result.

`run` trains `config` in `out_dir`. Every training batch is fresh (drawn from a generator
seeded by `config.seed`); the model is evaluated on a fixed held-out set (`evaluation`) at
step 0, every `eval_every` steps and at the end; the whole state is checkpointed
(`checkpoint`) every `ckpt_every` steps. Rerunning the same configuration in the same directory
resumes from the last checkpoint; a SIGINT/SIGTERM (or an exhausted `time_budget_s`) stops at
the next step boundary after saving, so no finished step is lost. A resumed run reproduces the
uninterrupted run exactly: the only randomness after initialization is the data generator,
whose state is checkpointed.

`steps` is a cap: with `stop_at_plateau` the run ends at the first evaluation where the
plateau rule (`evaluation.plateau`) holds; under the `"wsd"` schedule that evaluation starts
the decay instead, and the run ends where the decay does (`RunConfig.decay_end`). The decay's
start is a function of the recorded evaluations, so a resumed run finds it again. Every result
reports `converged`: whether the rule holds at its last evaluation, or, under the `"wsd"`
schedule, at the start of its decay (also evaluated). Objectives (`losses`), schedules, parameter groups and
interventions (`optim`) and the presets (`config`) are stated in their modules.

Targets: `"sample"` (the bijection's default, as in the reference protocol) trains on the
answer drawn by the generative process (ordinary next-token training: the posterior must be
inferred from samples); `"posterior"` (the HMM's and the dice's default) trains on the exact
posterior as a soft target. Every objective is a proper scoring rule, so both have the
posterior as their minimizer; soft targets remove the sampling noise of the gradient.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from implicit_em.windtunnel.checkpoint import (
    Progress,
    graceful_stop,
    load_branch,
    load_checkpoint,
    refuse_other,
    save_atomic,
    save_checkpoint,
    write_json,
)
from implicit_em.windtunnel.config import MODELS, SCALES, RunConfig, build_model, preset
from implicit_em.windtunnel.evaluation import (
    Plateau,
    evaluate,
    held_out,
    plateau,
    plateau_tolerance,
    uniform_kl,
)
from implicit_em.windtunnel.losses import loss_fn
from implicit_em.windtunnel.models import count_parameters
from implicit_em.windtunnel.optim import make_optimizer, set_learning_rates
from implicit_em.windtunnel.tasks import Batch, Task
from implicit_em.windtunnel.tracing import AttentionTrace, summarize_trace

__all__ = [
    "CHECKPOINT",
    "MODELS",
    "RESULT",
    "SCALES",
    "SNAPSHOTS",
    "RunConfig",
    "build_model",
    "held_out",
    "preset",
    "run",
    "state_path",
]

CHECKPOINT = "checkpoint.pt"
RESULT = "result.json"
TRACE = "trace.jsonl"
SNAPSHOTS = "snapshots.pt"
_PROBE_SIZE = 64


def state_path(out_dir: str | Path, step: int) -> Path:
    """Where `run(..., states_at=[step])` keeps the training state after `step` steps."""
    return Path(out_dir) / f"state-{step}.pt"


def _train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    config: RunConfig,
    step: int,
    decay_from: int | None,
) -> float:
    """One AdamW step on `batch` at the rates of `step`, gradients clipped; the loss."""
    set_learning_rates(optimizer, config, step, decay_from)
    loss = loss_fn(model(batch.tokens), batch, config.objective, config.targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    return loss.item()


def _record_evaluation(
    progress: Progress, model: nn.Module, test: Batch, config: RunConfig
) -> dict[str, Any]:
    """Evaluate on `test`, append the training loss since the last one and the held-out errors."""
    history = progress.history
    total, count = progress.running
    if count:
        history["step"].append(progress.step)
        history["loss"].append(total / count)
    progress.running = (0.0, 0)
    ev = evaluate(model, test, config.objective)
    history["eval_step"].append(progress.step)
    history["eval_bits_mae"].append(ev["bits_mae"])
    history["eval_kl"].append(ev["kl_bits"])
    return ev


def _plateau(
    progress: Progress, config: RunConfig, atol: float, judged_at: int | None = None
) -> Plateau:
    """The plateau rule on the evaluations up to `judged_at` (None: `config.decay_start`),
    with the absolute tolerance `atol`.

    A `"wsd"` run is judged on its evaluations up to the start of its decay: whether the KL
    had reached its plateau at the constant rate (the decay then lowers it further).
    """
    h = progress.history
    end = config.decay_start if judged_at is None else judged_at
    n = sum(step <= end for step in h["eval_step"])
    return plateau(
        h["eval_step"][:n],
        h["eval_kl"][:n],
        config.plateau_window,
        config.plateau_tol,
        config.min_steps,
        atol,
    )


def _last_step(config: RunConfig, decay_from: int | None) -> int:
    """The step a run ends at: the cap, or the end of a decay its plateau started."""
    return config.steps if decay_from is None else config.decay_end(decay_from)


def _decay_from(progress: Progress, config: RunConfig, atol: float) -> int | None:
    """Where a `"wsd"` run with `stop_at_plateau` started its decay: the first evaluation
    before `config.decay_start` at which the plateau rule held (None: not yet, or not such a
    run)."""
    if not (config.schedule == "wsd" and config.stop_at_plateau):
        return None
    for step in progress.history["eval_step"]:
        if step >= config.decay_start:
            return None
        if step > 0 and _plateau(progress, config, atol, judged_at=step).converged:
            return step
    return None


def _snapshot(progress: Progress, model: nn.Module) -> None:
    """Keep a copy of the weights at the current step (once per step)."""
    if progress.step not in progress.snapshots["steps"]:
        progress.snapshots["steps"].append(progress.step)
        progress.snapshots["states"].append(
            {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        )


def _reuse_result(
    path: Path, cfg: dict[str, Any], snapshot_every: int | None, trace_every: int | None
) -> dict[str, Any]:
    done = json.loads(path.read_text())
    refuse_other(path, done["config"], cfg)
    if snapshot_every is not None and "snapshots" not in done:
        raise ValueError(f"{path} was run without snapshots; use another directory")
    if trace_every is not None and "trace" not in done:
        raise ValueError(f"{path} was run without tracing; use another directory")
    return done


def _result(
    config: RunConfig,
    task: Task,
    model: nn.Module,
    progress: Progress,
    final: dict[str, Any],
    device: str,
) -> dict[str, Any]:
    atol = plateau_tolerance(config, final["uniform_kl_bits"])
    decay_from = _decay_from(progress, config, atol)
    rule = _plateau(progress, config, atol, decay_from)
    return {
        "status": "complete",
        "config": asdict(config),
        "task": {
            "name": task.name,
            "vocab_size": task.vocab_size,
            "seq_len": task.seq_len,
            "n_classes": task.n_classes,
        },
        "context_free_bits": getattr(task, "context_free_bits", None),
        "n_parameters": count_parameters(model),
        "steps": progress.step,
        "converged": rule.converged,
        "plateau": {
            "tol": config.plateau_tol,
            "atol": atol,
            "window": config.plateau_window,
            "judged_at": min(
                progress.step, config.decay_start if decay_from is None else decay_from
            ),
            "decay_from": decay_from,
            "since": rule.since,
            "relative_improvement": rule.relative_improvement,
        },
        "wall_time_s": progress.elapsed,
        "sessions": progress.sessions,
        "device": device,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **final,
        "history": progress.history,
    }


def run(
    config: RunConfig,
    out_dir: str | Path,
    device: str = "cpu",
    progress: bool = True,
    time_budget_s: float | None = None,
    trace_every: int | None = None,
    snapshot_every: int | None = None,
    states_at: Sequence[int] = (),
    branch_from: str | Path | None = None,
) -> dict[str, Any]:
    """Train (or resume, or reload) `config` in `out_dir` and return its result.

    Returns the result dictionary, also written to `out_dir/result.json` when the run is
    complete: `status` (`"complete"` or `"interrupted"`), `config`, `n_parameters`,
    `steps` done, `converged` and the `plateau` rule's numbers, `wall_time_s` (training
    time summed over sessions), held-out `kl_bits` and `bits_mae` with their `per_position`
    curves, `sigma_sum_gap` (unnormalized objectives), and the training `history`. A complete
    result already present for the same configuration is returned without training.

    `trace_every` (transformer only) traces the attention sites every that many steps with
    `AttentionTrace`: the records go to `out_dir/trace.jsonl` and their two-timescale summary
    to the result's `trace`. Tracing does not change training.

    `snapshot_every` keeps a copy of the model's weights every that many steps (and at the
    end) in `out_dir/snapshots.pt` (`{"steps": [...], "states": [...]}`), for measuring how
    far each part is from its final value (`timescales`).

    `states_at` keeps the whole training state after those many steps in
    `out_dir/state-<step>.pt` (see `state_path`); `branch_from`, such a file of the same
    configuration without its intervention (`freeze`, `freeze_at`), starts a fresh run of
    `config` from it instead of from step 0, with the same result as from step 0.

    A directory that holds a checkpoint or a result of another configuration is refused with
    the differing keys named; checkpoints are never mixed.
    """
    if trace_every is not None and config.model != "transformer":
        raise ValueError("tracing reads attention sites: it needs --model transformer")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = asdict(config)
    if (out / RESULT).exists():
        return _reuse_result(out / RESULT, cfg, snapshot_every, trace_every)
    task = config.make_task()
    torch.manual_seed(config.seed)
    model = build_model(config, task).to(device)
    optimizer = make_optimizer(model, config)
    data = torch.Generator().manual_seed(config.seed)
    test = held_out(config).to(device)
    atol = plateau_tolerance(config, uniform_kl(test))
    if branch_from is not None and not (out / CHECKPOINT).exists():
        state = load_branch(Path(branch_from), cfg, model, optimizer, data)
    else:
        state = load_checkpoint(out / CHECKPOINT, cfg, model, optimizer, data)
    state.sessions += 1
    model.train()
    bar = tqdm(
        total=config.steps,
        initial=state.step,
        disable=None if progress else True,  # None: drawn on a terminal only
        desc=f"{config.model}/{config.objective}",
    )
    tracer = (
        AttentionTrace(model, test.tokens[:_PROBE_SIZE], trace_every, state.trace, state.step)
        if trace_every is not None
        else None
    )
    quiet = tracer.quiet if tracer is not None else nullcontext
    start = time.perf_counter()
    decay_from = _decay_from(state, config, atol)
    with graceful_stop() as stop, tracer or nullcontext():
        if not state.history["eval_step"]:
            with quiet():
                _record_evaluation(state, model, test, config)
        while state.step < _last_step(config, decay_from):
            if snapshot_every is not None and state.step % snapshot_every == 0:
                _snapshot(state, model)
            batch = task.sample(config.batch_size, data).to(device)
            loss = _train_step(model, optimizer, batch, config, state.step, decay_from)
            if tracer is not None:
                tracer.step()
            state.step += 1
            state.running = (state.running[0] + loss, state.running[1] + 1)
            bar.update(1)
            plateaued = False
            end = _last_step(config, decay_from)
            if state.step % config.eval_every == 0 or state.step in (end, config.decay_start):
                with quiet():
                    ev = _record_evaluation(state, model, test, config)
                bar.set_postfix(kl=f"{ev['kl_bits']:.4f}", bits_mae=f"{ev['bits_mae']:.4f}")
                if config.schedule == "wsd":
                    decay_from = decay_from or _decay_from(state, config, atol)
                else:
                    plateaued = config.stop_at_plateau and _plateau(state, config, atol).converged
            out_of_time = time_budget_s is not None and time.perf_counter() - start >= time_budget_s
            if state.step % config.ckpt_every == 0 or stop.requested or out_of_time:
                state.elapsed += time.perf_counter() - start
                start = time.perf_counter()
                save_checkpoint(out / CHECKPOINT, cfg, model, optimizer, data, state)
            if state.step in states_at:
                save_checkpoint(state_path(out, state.step), cfg, model, optimizer, data, state)
            if plateaued:
                break
            if (stop.requested or out_of_time) and state.step < end:
                bar.close()
                return {
                    "status": "interrupted",
                    "config": cfg,
                    "steps": state.step,
                    "wall_time_s": state.elapsed,
                }
    bar.close()
    state.elapsed += time.perf_counter() - start
    if snapshot_every is not None:
        _snapshot(state, model)
    save_checkpoint(out / CHECKPOINT, cfg, model, optimizer, data, state)
    result = _result(config, task, model, state, evaluate(model, test, config.objective), device)
    if trace_every is not None:
        (out / TRACE).write_text("".join(json.dumps(r) + "\n" for r in state.trace))
        result["trace"] = {
            "every": trace_every,
            "file": TRACE,
            "summary": summarize_trace(state.trace),
        }
    if snapshot_every is not None:
        save_atomic(state.snapshots, out / SNAPSHOTS)
        result["snapshots"] = {"every": snapshot_every, "file": SNAPSHOTS}
    write_json(result, out / RESULT)
    return result

r"""Train several seeds of one configuration together: one process, one loop, stacked parameters.

`train_seeds(config, seeds, out_dir)` trains `replace(config, seed=s)` for every `s` in `seeds`
at once. The seeds' models are stacked (`stacked.StackedModel`): each step draws every seed's
batch from that seed's own generator, runs all seeds' forwards as one `vmap`, takes the
gradient of the sum of the seeds' losses (each seed's gradient is that of its own loss), clips
each seed's gradient by its own global norm and takes each seed's AdamW step
(`stacked_optim`). Every seed therefore follows the trajectory of `train.run` with that seed to
float32 rounding (bit for bit where the CPU rounds a batched matmul as a single one): the same
initialization, batches, held-out evaluations, plateau rule, schedule (a `"wsd"` decay starts
where that seed's plateau does) and final result. With `compile=True`
the forward is compiled by `torch.compile`, equal to float tolerance instead.

Each seed's result is `train.run`'s result, written to `out_dir/seed-<s>/result.json` (so
`train.run(replace(config, seed=s), out_dir / f"seed-{s}")` returns it), except that
`wall_time_s` is the time of the loop that trained the seeds together, and `sessions` counts
that loop's sessions. A seed that stops at its plateau leaves the stack; the others go on.
The stack is checkpointed every `ckpt_every` steps (`seeds_checkpoint`, loadable with
`weights_only=True`); rerunning the same call resumes it, and a resumed run equals an
uninterrupted one. SIGINT/SIGTERM or an exhausted `time_budget_s` stop at the next step
boundary after saving. Tracing, weight snapshots, saved states and branching are `train.run`'s
alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from implicit_em.windtunnel.checkpoint import Progress, graceful_stop, refuse_other, write_json
from implicit_em.windtunnel.config import RunConfig
from implicit_em.windtunnel.evaluation import evaluate, held_out, plateau_tolerance, uniform_kl
from implicit_em.windtunnel.losses import loss_fn
from implicit_em.windtunnel.optim import group_rate
from implicit_em.windtunnel.seeds_checkpoint import SeedsState, load_seeds, save_seeds
from implicit_em.windtunnel.stacked import StackedModel, parameter_groups
from implicit_em.windtunnel.stacked_optim import StackedAdamW, clip_per_seed
from implicit_em.windtunnel.tasks import Task
from implicit_em.windtunnel.train import (
    RESULT,
    _decay_from,
    _last_step,
    _plateau,
    _record_evaluation,
    _result,
)

__all__ = ["seed_dir", "train_seeds"]


def seed_dir(out_dir: str | Path, seed: int) -> Path:
    """Where `train_seeds` writes the result of `seed`."""
    return Path(out_dir) / f"seed-{seed}"


class _Seed:
    """One seed in the stack: its configuration, held-out set, data generator and progress."""

    def __init__(self, config: RunConfig, seed: int, device: str) -> None:
        self.seed = seed
        self.config = replace(config, seed=seed)
        self.test = held_out(self.config).to(device)
        self.atol = plateau_tolerance(self.config, uniform_kl(self.test))
        self.data = torch.Generator().manual_seed(seed)
        self.progress = Progress()
        self.decay_from: int | None = None


def _rates(
    config: RunConfig, groups: set[str], step: int, seeds: list[_Seed]
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each group's rate for each seed at `step`, and each group's weight decay (as
    `optim.make_optimizer` sets them: the values' decay divided by their multiplier)."""
    rates, decays = {}, {}
    for group in groups:
        mult = config.value_lr_mult if group == "values" else 1.0
        rates[group] = [group_rate(config, group, mult, step, s.decay_from) for s in seeds]
        decays[group] = config.weight_decay / mult
    return rates, decays


def _train_step(
    model: StackedModel,
    optimizer: StackedAdamW,
    task: Task,
    config: RunConfig,
    seeds: list[_Seed],
    step: int,
    device: str,
) -> list[float]:
    """One step of every seed in the stack; the seeds' losses."""
    batches = [task.sample(config.batch_size, s.data).to(device) for s in seeds]
    logits = model(torch.stack([b.tokens for b in batches]))
    losses = torch.stack(
        [
            loss_fn(rows, b, config.objective, config.targets)
            for rows, b in zip(logits.unbind(0), batches, strict=True)
        ]
    )
    names = list(model.params)
    grads = {  # contiguous, as a model's own gradients: the norms then sum in the same order
        n: g.contiguous()
        for n, g in zip(
            names, torch.autograd.grad(losses.sum(), list(model.params.values())), strict=True
        )
    }
    clip_per_seed(grads, config.grad_clip)
    rates, decays = _rates(config, set(optimizer.groups.values()), step, seeds)
    optimizer.step(model.params, grads, rates, decays)
    return losses.tolist()


def _evaluate_step(seed: _Seed, model: StackedModel, row: int, end: int) -> bool:
    """Evaluate `seed` if its step calls for it (as `train.run` does); whether it has finished
    (its plateau reached, or its last step)."""
    config, p = seed.config, seed.progress
    plateaued = False
    if p.step % config.eval_every == 0 or p.step in (end, config.decay_start):
        _record_evaluation(p, model.seed_view(row), seed.test, config)
        if config.schedule == "wsd":
            seed.decay_from = seed.decay_from or _decay_from(p, config, seed.atol)
        else:
            plateaued = config.stop_at_plateau and _plateau(p, config, seed.atol).converged
    return plateaued or p.step >= _last_step(config, seed.decay_from)


def _finish(
    seed: _Seed, model: StackedModel, row: int, task: Task, out: Path, device: str
) -> dict[str, Any]:
    """Write and return the result of `seed` (as `train.run` does at its end)."""
    view = model.seed_view(row)
    final = evaluate(view, seed.test, seed.config.objective)
    result = _result(seed.config, task, view, seed.progress, final, device)
    directory = seed_dir(out, seed.seed)
    directory.mkdir(parents=True, exist_ok=True)
    write_json(result, directory / RESULT)
    return result


def _restore(
    state: SeedsState | None,
    model: StackedModel,
    optimizer: StackedAdamW,
    seeds: list[_Seed],
    device: str,
) -> None:
    if state is None:
        return
    model.params = {n: p.to(device).requires_grad_() for n, p in state.params.items()}
    optimizer.load_state_dict(
        {
            "steps": state.optimizer["steps"],
            "exp_avg": {n: t.to(device) for n, t in state.optimizer["exp_avg"].items()},
            "exp_avg_sq": {n: t.to(device) for n, t in state.optimizer["exp_avg_sq"].items()},
        }
    )
    for seed, rng, progress in zip(seeds, state.data_rng, state.progress, strict=True):
        seed.data.set_state(rng)
        seed.progress = progress
        seed.decay_from = _decay_from(progress, seed.config, seed.atol)


def _save(
    out: Path, cfg: dict[str, Any], model: StackedModel, opt: StackedAdamW, seeds: list[_Seed]
) -> None:
    state = SeedsState(
        seeds=[s.seed for s in seeds],
        params=model.params,
        optimizer=opt.state_dict(),
        data_rng=[s.data.get_state() for s in seeds],
        progress=[s.progress for s in seeds],
    )
    save_seeds(out, cfg, state)


def _retire(
    finished: list[int], active: list[_Seed], model: StackedModel, optimizer: StackedAdamW
) -> list[_Seed]:
    """Drop the rows `finished` from the stack; the seeds that go on."""
    keep = [r for r in range(len(active)) if r not in finished]
    if keep:
        rows = torch.tensor(keep, dtype=torch.long, device=next(iter(model.params.values())).device)
        model.keep(rows)
        optimizer.keep(rows)
    return [active[r] for r in keep]


def _interrupted(seed: _Seed) -> dict[str, Any]:
    return {
        "status": "interrupted",
        "config": asdict(seed.config),
        "steps": seed.progress.step,
        "wall_time_s": seed.progress.elapsed,
    }


def train_seeds(
    config: RunConfig,
    seeds: Sequence[int],
    out_dir: str | Path,
    device: str = "cpu",
    progress: bool = True,
    time_budget_s: float | None = None,
    compile: bool = False,
) -> list[dict[str, Any]]:
    """Train (or resume, or reload) `config` for every seed in `seeds` together; their results.

    The results come in the order of `seeds`, each as `train.run` returns it (see the module):
    `"complete"`, or `"interrupted"` with the step reached. A seed whose result is already in
    `out_dir` is returned without training. `config.seed` is ignored.
    """
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {seeds}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, Any]] = {}
    for s in seeds:
        path = seed_dir(out, s) / RESULT
        if path.exists():
            results[s] = json.loads(path.read_text())
            refuse_other(path, results[s]["config"], asdict(replace(config, seed=s)))
    todo = [s for s in seeds if s not in results]
    if not todo:
        return [results[s] for s in seeds]
    cfg = {k: v for k, v in asdict(config).items() if k != "seed"}
    state = load_seeds(out, cfg, todo, set(results))
    task = config.make_task()
    model = StackedModel(config, task, todo, compile=compile).to(device)
    optimizer = StackedAdamW(model.params, parameter_groups(config, list(model.params)))
    active = [_Seed(config, s, device) for s in todo]
    _restore(state, model, optimizer, active, device)
    for s in active:
        s.progress.sessions += 1
    step = active[0].progress.step
    bar = tqdm(
        total=config.steps,
        initial=step,
        disable=None if progress else True,
        desc=f"{config.model}/{config.objective} x{len(active)} seeds",
    )
    start = began = time.perf_counter()

    def account() -> None:
        nonlocal start
        now = time.perf_counter()
        for s in active:
            s.progress.elapsed += now - start
        start = now

    with graceful_stop() as stop:
        for row, s in enumerate(active):
            if not s.progress.history["eval_step"]:
                _record_evaluation(s.progress, model.seed_view(row), s.test, s.config)
        finished = [r for r, s in enumerate(active) if step >= _last_step(s.config, s.decay_from)]
        while active:
            if finished:
                account()
                for r in finished:
                    results[active[r].seed] = _finish(active[r], model, r, task, out, device)
                active = _retire(finished, active, model, optimizer)
                if not active:
                    break
                _save(out, cfg, model, optimizer, active)
            ends = [_last_step(s.config, s.decay_from) for s in active]
            losses = _train_step(model, optimizer, task, config, active, step, device)
            step += 1
            bar.update(1)
            finished = []
            for r, (s, loss, end) in enumerate(zip(active, losses, ends, strict=True)):
                s.progress.step = step
                s.progress.running = (s.progress.running[0] + loss, s.progress.running[1] + 1)
                if _evaluate_step(s, model, r, end):
                    finished.append(r)
            out_of_time = time_budget_s is not None and time.perf_counter() - began >= time_budget_s
            if step % config.ckpt_every == 0 or stop.requested or out_of_time:
                account()
                _save(out, cfg, model, optimizer, active)
            if (stop.requested or out_of_time) and len(finished) < len(active):
                bar.close()
                for r in finished:
                    results[active[r].seed] = _finish(active[r], model, r, task, out, device)
                for s in active:
                    results.setdefault(s.seed, _interrupted(s))
                return [results[s] for s in seeds]
    bar.close()
    return [results[s] for s in seeds]

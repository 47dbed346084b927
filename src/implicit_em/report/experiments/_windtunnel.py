"""Shared by E10-E13: the wind-tunnel configuration of a report size, its units of work, and
the one measurement every wind-tunnel criterion reads (the held-out KL of a model, in bits).

A size's configuration (in each experiment's protocol file) names a preset (`scale`) with
`train` overrides (the same for every task, model and objective: architecture, optimizer,
schedule and plateau rule), the task sizes (`tasks`), one `budget` per task (`steps`, the cap,
and `min_steps`, the same for every model and objective of the task), the `seeds`, the `label`
of its run directories, `runs_dir` (`outputs/windtunnel`, the CLI's default, so that runs made
by `implicit-em windtunnel` are reused when the configuration matches; None: a folder inside the
experiment's own output) and `workers`, the configurations trained at once in separate
processes. Quick and full run the same tasks (the reference's sizes) and models; quick has
fewer steps (below the gate's `min_steps`, so that it cannot converge and its items read
`inconclusive (not converged)`), shorter warmup, evaluation and checkpoint intervals, fewer
seeds and a smaller held-out set. A unit trains its own runs (`unit_folder`) with `workers` processes,
so it declares that many threads, and a GPU when the size's `device` is one (`on_gpu`).

**One budget rule, one convergence gate.** E10 and E11 train every run to a fixed length
(the task's `steps`) under warmup and a cosine to zero, and read the convergence gate at its end
(`implicit_em.windtunnel.evaluation.plateau` with no relative tolerance): the run has converged
when the mean held-out KL of its last 20% of steps fell by less than 0.05% of the task's floor
(the uniform prediction's KL) from the 20% before, and the final KL is read. The tolerance is
well under every error judged (the old one, 1% of the floor, exceeded the whole KL left to learn
on the bijection, so every run passed at its first check). Every criterion requires every run of
its experiment to have converged (else the items it bears on read `inconclusive (not
converged)`; the experiment's verdict is left alone). E12 reads its own protocol's rule.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.report.judging.stats import mean_interval
from implicit_em.report.running.progress import progress
from implicit_em.windtunnel.config import RunConfig, build_model, preset
from implicit_em.windtunnel.evaluation import evaluate, held_out, plateau
from implicit_em.windtunnel.grid import run_configs, worker_pool
from implicit_em.windtunnel.losses import UNNORMALIZED
from implicit_em.windtunnel.tasks import Batch

TASKS = ("bijection", "hmm", "dice")
DEVELOPMENT_SEEDS = range(7000, 7100)
"""The seeds on which the full size's model, rate and budgets were chosen (docs/windtunnel.md,
'Choosing the full size'): no size of E10-E12 may report on them."""
MODEL_NAMES = {
    "transformer": "transformer",
    "mlp-prefix": "prefix MLP",
    "mlp-pos": "position-wise MLP",
}
TASK_NAMES = {"bijection": "bijection", "hmm": "HMM filter", "dice": "dice (Laplace)"}


def task_config(config: dict[str, Any], task: str, **overrides: Any) -> RunConfig:
    """The configuration of `task` at a report size: the size's `train` fields, the task's
    sizes and its budget (`overrides` replace any field)."""
    fields = {**config["train"], "task_params": config["tasks"][task], **config["budget"][task]}
    return preset(task, config["scale"], **{**fields, **overrides})


def base_config(config: dict[str, Any]) -> RunConfig:
    """The bijection configuration of a report size (E10's, which E11 and E13 read too)."""
    return task_config(config, "bijection")


def runs_dir(config: dict[str, Any], out: Path) -> Path:
    return Path(config["runs_dir"]) if config["runs_dir"] else out / "runs"


@contextmanager
def unit_folder() -> Iterator[Path]:
    """The folder a unit trains under (its `out` for `runs_dir`): the size's `runs_dir` when
    it names one (runs there are reused by later units and reports on the same machine), else
    a temporary folder's `runs`, removed with the unit. Nothing a unit returns lives there."""
    with tempfile.TemporaryDirectory(prefix="implicit-em-runs-") as folder:
        yield Path(folder)


def on_gpu(config: dict[str, Any]) -> bool:
    """Whether a unit training on the size's `device` asks for a GPU: any device but the CPU."""
    return config.get("device", "cpu") != "cpu"


@contextmanager
def pool(config: dict[str, Any]) -> Iterator[Executor | None]:
    """The worker processes of a report size (None: train in this process)."""
    with worker_pool(config.get("workers", 1)) as workers:
        yield workers


def train(
    config: dict[str, Any],
    out: Path,
    configs: Sequence[RunConfig],
    workers: Executor | None,
    **run_options: Any,
) -> list[dict[str, Any]]:
    """Train (or reuse) `configs` in the size's run directories; a summary of each."""
    return [summary(r) for r in _run(config, out, configs, workers, **run_options)]


def run_results(
    config: dict[str, Any],
    out: Path,
    configs: Sequence[RunConfig],
    workers: Executor | None,
    **run_options: Any,
) -> list[dict[str, Any]]:
    """Train (or reuse) `configs`; each run's whole result, its evaluation history included."""
    return _run(config, out, configs, workers, **run_options)


def train_all(
    config: dict[str, Any],
    out: Path,
    configs: Sequence[RunConfig],
    workers: Executor | None,
    **run_options: Any,
) -> None:
    """Train `configs` in one batch, longest first, in the workers; a later `train` of the
    same configurations reads the finished runs from their directories. A killed batch loses at
    most the steps since each running configuration's last checkpoint.
    """
    _run(config, out, sorted(configs, key=lambda c: -c.steps), workers, **run_options)


def _run(
    config: dict[str, Any],
    out: Path,
    configs: Sequence[RunConfig],
    workers: Executor | None,
    **run_options: Any,
) -> list[dict[str, Any]]:
    return run_configs(
        configs,
        config["label"],
        runs_dir(config, out),
        device=config.get("device", "cpu"),
        progress=progress,
        pool=workers,
        **run_options,
    )


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """What the experiments read of a run's result (plain JSON for a unit)."""
    keys = (
        "kl_bits",
        "bits_mae",
        "uniform_kl_bits",
        "context_free_bits",
        "sigma_sum_gap",
        "converged",
        "steps",
        "wall_time_s",
        "n_parameters",
    )
    return {
        **{k: result[k] for k in keys},
        "plateau_fall_floor": plateau_fall_floor(result),
        "kl_initial": result["history"]["eval_kl"][0],
        "per_position_kl": result["per_position"]["kl"],
    }


def plateau_fall_floor(result: dict[str, Any]) -> float:
    """How far the mean held-out KL fell from the window before to the last window judged by
    the plateau rule, as a share of the floor (the uniform prediction's KL): the number that
    the rule's floor tolerance bounds. NaN before both windows hold an evaluation."""
    rule, history = result["plateau"], result["history"]
    judged = [
        (s, k)
        for s, k in zip(history["eval_step"], history["eval_kl"], strict=True)
        if s <= rule["judged_at"]
    ]
    found = plateau(
        [s for s, _ in judged],
        [k for _, k in judged],
        rule["window"],
        rule["tol"],
        atol=rule["atol"],
    )
    floor = result["uniform_kl_bits"]
    return found.fall / floor if found.fall is not None and floor > 0 else math.nan


def model_kl(model: nn.Module, run: RunConfig) -> dict[str, float]:
    """The held-out KL to the exact posterior (bits per supervised position) of `model`, read
    as `run`'s objective reads its outputs, on `run`'s held-out batch, with the floor (the
    uniform prediction's KL) and the entropy error (`bits_mae`): the measurement a trained run
    reports (`evaluate`), for a model
    given from outside (the known-answer controls)."""
    found = evaluate(model, held_out(run), run.objective)
    keys = ("kl_bits", "uniform_kl_bits", "bits_mae")
    return {k: found[k] for k in keys}


class PlantedPosterior(nn.Module):
    r"""A model that knows the exact posterior $p$ of a held-out batch: its outputs read, under
    `objective`, as $q = (1 - \epsilon)\,p + \epsilon/K$ (`blur` = $\epsilon$; 0: Bayes itself).

    Logits $\log q$ for the softmax objectives, $\operatorname{logit}(q)$ for the sigmoid ones
    (whose outputs are read as $\sigma(z) / \sum_k \sigma(z_k) = q$). Rows of tokens not in
    the batch are refused.
    """

    def __init__(self, batch: Batch, objective: str, blur: float = 0.0) -> None:
        super().__init__()
        k = batch.posterior.shape[-1]
        q = ((1 - blur) * batch.posterior + blur / k).clamp_min(1e-12)
        self.tokens = batch.tokens
        self.logits = torch.logit(q) if objective in UNNORMALIZED else q.log()

    def forward(self, tokens: Tensor) -> Tensor:
        same = (tokens[:, None, :] == self.tokens[None, :, :]).all(-1)
        if not bool(same.any(-1).all()):
            raise ValueError("PlantedPosterior knows only the rows of its own batch")
        return self.logits[same.float().argmax(-1)].float()


def planted_kl(run: RunConfig, blur: float) -> dict[str, float]:
    """`model_kl` of the model that outputs the posterior blurred by `blur` on `run`'s
    held-out batch."""
    return model_kl(PlantedPosterior(held_out(run), run.objective, blur), run)


def untrained_kl(run: RunConfig) -> dict[str, float]:
    """`model_kl` of `run`'s model as initialized by its seed (no training step)."""
    torch.manual_seed(run.seed)
    return model_kl(build_model(run, run.make_task()), run)


def ratio(a: float, b: float) -> float:
    """`a / b`, infinite when `b` is 0 and `a` is not."""
    if b > 0:
        return a / b
    return math.inf if a > 0 else 1.0


def supervised(curve: list[float | None], floor: float = 1e-7) -> tuple[list[int], list[float]]:
    """The positions with a value, and the values clipped below at `floor` (for a log axis)."""
    pairs = [(t, max(v, floor)) for t, v in enumerate(curve) if v is not None]
    return [t for t, _ in pairs], [v for _, v in pairs]


def per_seed(units: dict[int, Any], read: Callable[[Any], float]) -> list[float]:
    """`read(unit)` for every seed's unit, in seed order."""
    return [read(units[s]) for s in sorted(units)]


def interval_text(values: Sequence[float]) -> str:
    """`mean [low, high]` of a 95% Student t interval over seeds, for tables."""
    i = mean_interval(list(values), "t")
    return f"{i.estimate:.4g} [{i.low:.3g}, {i.high:.3g}]"


def converged_text(summaries: Sequence[dict[str, Any]]) -> str:
    """`n/N (≤ x%)`: how many runs met the plateau rule, and the largest fall of the mean
    held-out KL over the last window judged, as a share of the floor (a fall at or below 0
    means the KL no longer fell)."""
    done = sum(bool(u["converged"]) for u in summaries)
    falls = [u.get("plateau_fall_floor", math.nan) for u in summaries]
    finite = [f for f in falls if math.isfinite(f)]
    worst = f"{100 * max(finite):.2g}%" if finite else "n/a"
    return f"{done}/{len(summaries)} (≤ {worst})"

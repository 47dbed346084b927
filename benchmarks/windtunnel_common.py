"""What the wind-tunnel benchmarks share: the cost of a configuration's training step and of
one held-out evaluation, timed on a clock of the caller's choice.

The scripts import it from their own folder (`python benchmarks/<script>.py` puts the folder
on the path).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from implicit_em.windtunnel.config import RunConfig, build_model
from implicit_em.windtunnel.evaluation import evaluate, held_out
from implicit_em.windtunnel.optim import make_optimizer
from implicit_em.windtunnel.train import _train_step


def step_costs(
    config: RunConfig, steps: int, untimed: int, clock: Callable[[], float]
) -> tuple[float, float]:
    """Seconds on `clock` per training step of `config` (over `steps` steps, after `untimed`
    steps that are not timed), and of one held-out evaluation of the trained model; the model
    and the data start from seed 0."""
    task = config.make_task()
    torch.manual_seed(0)
    model = build_model(config, task)
    optimizer = make_optimizer(model, config)
    data = torch.Generator().manual_seed(0)
    for step in range(untimed):
        _train_step(model, optimizer, task.sample(config.batch_size, data), config, step, None)
    start = clock()
    for step in range(steps):
        _train_step(model, optimizer, task.sample(config.batch_size, data), config, step, None)
    per_step = (clock() - start) / steps
    test = held_out(config)
    start = clock()
    evaluate(model, test, config.objective)
    return per_step, clock() - start

r"""E12's one-head lag arm: the head of `windtunnel.one_head` on the lag task, shared by the
value-rate test (`_value_rate`) and the one-part freeze (`_one_part_freeze`).

A size's `e12.lag` holds the task (`n_symbols`, `self_prob`, `length`, `n_train`, `n_test`),
the head (`d_k`, `d_v`) and plain SGD (`lr`, `steps`, `eval_every`). Seed $s$ draws the
training set from $s$, the held-out set from $s + 10^6$ and the initial weights from $s$.
Training is full batch on the fixed training set; every evaluation reads the held-out KL to
the exact posterior (bits) and the attention's mean row entropy (bits). A run may start from
`weights` (a branch, or planted weights) at step `start`.

The settling step of a series $u_t$ read at steps $t_0 < \dots < t_N$ (`settled_from`) is the
first step from which $|u_t - u_{t_N}| \le \epsilon\,|u_{t_0} - u_{t_N}|$ holds to the end, with
$\epsilon$ = `SETTLED` (10% of its net change).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import torch
from torch import Tensor

from implicit_em.windtunnel.one_head import OneHead, Run, attention_summary, train
from implicit_em.windtunnel.one_head_tasks import Data, lag_task
from implicit_em.windtunnel.timescales import settling_step

SETTLED = 0.1
"""A series has settled from the step where it stays within this share of its net change."""
HELD_OUT = 10**6
"""Seed offset of the held-out set."""


@cache
def _data(seed: int, n: int, length: int, n_symbols: int, self_prob: float) -> Data:
    return lag_task(seed, n, length, n_symbols, self_prob)


def data(lag: Mapping[str, Any], seed: int) -> tuple[Data, Data]:
    """The training and held-out sets of `seed`."""
    task = (lag["length"], lag["n_symbols"], float(lag["self_prob"]))
    return _data(seed, lag["n_train"], *task), _data(seed + HELD_OUT, lag["n_test"], *task)


def model(
    lag: Mapping[str, Any], seed: int, weights: Mapping[str, Tensor] | None = None
) -> OneHead:
    """The float64 head of `seed` (inputs: one-hot symbol and position), at `weights` if given."""
    head = OneHead(
        lag["n_symbols"] + lag["length"], lag["d_k"], lag["d_v"], lag["n_symbols"], seed
    ).double()
    if weights is not None:
        head.load_state_dict({k: v.clone() for k, v in weights.items()})
    return head


def floor_bits(lag: Mapping[str, Any], seed: int) -> float:
    """The uniform prediction's held-out KL (bits)."""
    _, test = data(lag, seed)
    return test.kl_bits(torch.zeros(*test.y.shape, lag["n_symbols"], dtype=torch.float64))


def run(
    lag: Mapping[str, Any],
    seed: int,
    mults: Mapping[str, float] | None = None,
    *,
    weights: Mapping[str, Tensor] | None = None,
    start: int = 0,
    freeze: str = "",
    states_at: Sequence[int] = (),
    snapshot_every: int = 0,
) -> Run:
    """One plain-SGD run of the lag head (see the module)."""
    train_set, test = data(lag, seed)

    def evaluate(head: OneHead) -> dict[str, float]:
        logits, _ = head(test.x)
        return {"kl_bits": test.kl_bits(logits), **attention_summary(head, test.x)}

    return train(
        model(lag, seed, weights),
        train_set.x,
        train_set.y,
        lag["steps"],
        lag["lr"],
        mults,
        start=start,
        freeze=freeze,
        evaluate=evaluate,
        eval_every=lag["eval_every"],
        states_at=states_at,
        snapshot_every=snapshot_every,
    )


def curve(result: Run, key: str = "kl_bits") -> tuple[list[int], list[float]]:
    """The evaluation steps of a run and one series read at them."""
    steps = sorted(result.evaluations)
    return steps, [result.evaluations[s][key] for s in steps]


def settled_from(steps: Sequence[int], values: Sequence[float]) -> int:
    """The settling step of a series (see the module)."""
    net = abs(values[0] - values[-1])
    if net == 0:
        return steps[0]
    return settling_step(steps, [abs(v - values[-1]) / net for v in values], SETTLED + 1e-12)

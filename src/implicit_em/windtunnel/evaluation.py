r"""Held-out evaluation of a wind-tunnel model, and the plateau rule that says a run converged.

The held-out set is `n_test` sequences from a generator of its own (seeded by the run's seed
plus a fixed offset), the same at every evaluation, so the held-out KL is a deterministic
function of the weights.

**Plateau rule.** At an evaluation at step $s$ (with $s \ge$ `min_steps`), split the steps
done into windows of the last fraction $w$ = `plateau_window`: $B = ((1-w)s,\ s]$, the last
window, and $A = ((1-2w)s,\ (1-w)s]$, the one before it. With $\bar K_A$ and $\bar K_B$ the mean
held-out KL of the evaluations in each, the run has converged when the mean fell by less than a
fraction $\tau$ = `plateau_tol` (or by less than $\epsilon$ in absolute terms):

$$
\frac{\bar K_A - \bar K_B}{\bar K_A} < \tau .
$$

Means over windows, not single evaluations: training on sampled answers makes the held-out KL
fluctuate from one evaluation to the next, and a rule on single values (or on the best value so
far, which keeps creeping down by lucky draws at a constant rate) passes and fails by chance.
A steady decline shows as a fall of the mean; fluctuations around a level do not.

Near an exact fit the KL shrinks by orders of magnitude while nothing measurable changes, so an
absolute improvement below $\epsilon$ bits also counts as a plateau: `plateau_tolerance` gives
$\epsilon = \max(\epsilon_0, \phi\,F)$, with $\epsilon_0$ = `plateau_atol` (1e-5 bits by
default), $F$ the uniform prediction's KL on the held-out set (the floor) and $\phi$ =
`plateau_floor_tol` (0 by default). With $\phi > 0$ the rule reads the improvement in the
units of a criterion stated as a share of the floor: an improvement below $\phi F$ over the
window cannot move such a share by more than $\phi$. A long plateau followed by a sudden drop
(as attention circuits sometimes form) would pass the rule early; `min_steps` guards against that,
and a run that never meets the rule by its step cap reports `converged = False`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.windtunnel.config import RunConfig
from implicit_em.windtunnel.losses import NORMALIZED
from implicit_em.windtunnel.metrics import position_errors, predictive_log_probs, sigma_sum_gap
from implicit_em.windtunnel.tasks import Batch

__all__ = ["Plateau", "evaluate", "held_out", "plateau", "plateau_tolerance", "uniform_kl"]

_EVAL_SEED_OFFSET = 1_000_003


def held_out(config: RunConfig) -> Batch:
    """The fixed held-out batch of `config` (`n_test` sequences from their own generator)."""
    generator = torch.Generator().manual_seed(config.seed + _EVAL_SEED_OFFSET)
    return config.make_task().sample(config.n_test, generator)


@torch.no_grad()
def evaluate(model: nn.Module, test: Batch, objective: str, chunk: int = 1024) -> dict[str, Any]:
    """Errors in bits of `model` on the held-out batch `test` (see `metrics`).

    Returns `kl_bits` (mean KL per supervised position, the judged metric), `bits_mae` (mean
    entropy error), `per_position` curves, `sigma_sum_gap` (mean $|\\sum_k\\sigma(z_k) - 1|$)
    for the unnormalized objectives (None for CE), and `uniform_kl_bits`, the KL of the uniform
    prediction, $\\log_2 K - H(p)$ averaged: the error of a model that reads nothing. On the
    bijection it is the context-free floor (the current key says nothing of its value); on the
    HMM and the dice the current token is informative, and a position-wise model can beat it.
    """
    was_training = model.training
    model.eval()
    logits = torch.cat(
        [model(test.tokens[i : i + chunk]) for i in range(0, test.tokens.shape[0], chunk)]
    )
    model.train(was_training)
    errors = position_errors(test.posterior, predictive_log_probs(logits, objective), test.mask)

    def curve(x: Tensor) -> list[float | None]:
        return [None if math.isnan(v) else v for v in x.tolist()]

    return {
        "bits_mae": errors.bits_mae,
        "kl_bits": errors.kl_mean,
        "sigma_sum_gap": (None if objective in NORMALIZED else sigma_sum_gap(logits, test.mask)),
        "uniform_kl_bits": uniform_kl(test),
        "per_position": {
            "entropy_mae": curve(errors.entropy_mae),
            "kl": curve(errors.kl),
            "entropy": curve(errors.entropy),
        },
    }


def uniform_kl(test: Batch) -> float:
    """The KL of the uniform prediction on `test` (bits per supervised position): the floor."""
    uniform = torch.full_like(test.posterior, -math.log(test.posterior.shape[-1]))
    return position_errors(test.posterior, uniform, test.mask).kl_mean


def plateau_tolerance(config: RunConfig, floor: float) -> float:
    """The plateau rule's absolute tolerance in bits, given the `floor` (see the module)."""
    return max(config.plateau_atol, config.plateau_floor_tol * floor)


@dataclass(frozen=True)
class Plateau:
    r"""The plateau rule at the last evaluation: `converged`, `since` (the last evaluation step
    before the last window), the `relative_improvement` of the window means and their `fall`
    in bits, $\bar K_A - \bar K_B$ (both None before both windows hold an evaluation)."""

    converged: bool
    since: int | None
    relative_improvement: float | None
    fall: float | None = None


def plateau(
    steps: Sequence[int],
    kl: Sequence[float],
    window: float,
    tol: float,
    min_steps: int = 0,
    atol: float = 1e-5,
) -> Plateau:
    """Apply the plateau rule (see the module) to the evaluation `steps` and their `kl`."""
    if len(steps) != len(kl):
        raise ValueError("steps and kl must have the same length")
    if not steps or steps[-1] < min_steps:
        return Plateau(False, None, None)
    end = steps[-1]
    start = (1.0 - window) * end
    earlier = [s for s in steps[:-1] if s <= start]
    since = earlier[-1] if earlier else None
    before = [k for s, k in zip(steps, kl, strict=True) if start - window * end < s <= start]
    last = [k for s, k in zip(steps, kl, strict=True) if s > start]
    if not before or not all(math.isfinite(k) for k in kl):
        return Plateau(False, since, None)
    mean_before, mean_last = sum(before) / len(before), sum(last) / len(last)
    fall = mean_before - mean_last
    improvement = fall / mean_before if mean_before > 0 else 0.0
    return Plateau(improvement < tol or fall < atol, since, improvement, fall)

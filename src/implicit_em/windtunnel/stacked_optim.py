r"""AdamW and gradient clipping over stacked parameters: S seeds' models in one set of tensors.

Every tensor here has the seed on its first axis, `[S, ...]`. Both operations act on each seed
alone and repeat, operation by operation, what `torch.optim.AdamW` (its single-tensor CPU path)
and `nn.utils.clip_grad_norm_` do to one model, so the optimizer adds no difference of its own
between a seed's row and the model trained alone.

**Clipping, per seed.** With $g_s$ the gradients of seed $s$ (all its tensors),
$n_s = \lVert(\lVert g_{s,1}\rVert_2, \dots, \lVert g_{s,P}\rVert_2)\rVert_2$ and
$g_s \leftarrow g_s \min(1, c / (n_s + 10^{-6}))$ for the threshold $c$: a global norm per seed,
never across seeds.

**AdamW, per seed.** With the rate $\eta_{s,g}$ of seed $s$ in parameter group $g$, the decay
$\lambda_g$, step $t$ and betas $(\beta_1, \beta_2)$:

$$
\theta \leftarrow \theta\,(1 - \eta_{s,g}\lambda_g),\quad
m \leftarrow m + (1-\beta_1)(g - m),\quad
v \leftarrow \beta_2 v + (1-\beta_2) g^2,\quad
\theta \leftarrow \theta - \frac{\eta_{s,g}}{1-\beta_1^t}\,\frac{m}{\sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon}.
$$

Only the rates differ between seeds (a `"wsd"` run that stops at its plateau starts its decay
at a step of its own); the step count $t$ is shared, since the seeds step together.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["StackedAdamW", "clip_per_seed"]

_CLIP_EPS = 1e-6


def _per_seed(values: list[float], like: Tensor) -> Tensor:
    """`values` (one per seed, computed in float64 as Python floats are) in `like`'s dtype and
    on its device, `[S]`."""
    return torch.tensor(values, dtype=torch.float64).to(like.dtype).to(like.device)


def _rows(values: Tensor, like: Tensor) -> Tensor:
    """`values[S]` shaped to broadcast against `like[S, ...]`."""
    return values.view((values.shape[0],) + (1,) * (like.dim() - 1))


@torch.no_grad()
def clip_per_seed(grads: Mapping[str, Tensor], max_norm: float) -> Tensor:
    """Scale each seed's gradients (in place) to a global norm of at most `max_norm`; the
    norms before clipping, `[S]`."""
    tensors = list(grads.values())
    n_seeds = tensors[0].shape[0]
    norms = []
    for s in range(n_seeds):
        per_tensor = torch._foreach_norm([g[s] for g in tensors], 2.0)
        norms.append(torch.linalg.vector_norm(torch.stack(per_tensor)))
    total = torch.stack(norms)
    coef = torch.clamp(max_norm / (total + _CLIP_EPS), max=1.0)
    for g in tensors:
        g.mul_(coef.view((n_seeds,) + (1,) * (g.dim() - 1)))
    return total


class StackedAdamW:
    """AdamW over stacked parameters `{name: [S, ...]}` with a rate per seed and group.

    `groups` maps each parameter name to its group's name; `step(params, grads, rates, decays)`
    takes the rates `{group: [rate of each seed]}` and the decays `{group: lambda}`.
    """

    def __init__(
        self,
        params: Mapping[str, Tensor],
        groups: Mapping[str, str],
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
    ) -> None:
        self.groups = dict(groups)
        self.betas = betas
        self.eps = eps
        self.steps = 0
        self.exp_avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in params.items()}

    @torch.no_grad()
    def step(
        self,
        params: Mapping[str, Tensor],
        grads: Mapping[str, Tensor],
        rates: Mapping[str, list[float]],
        decays: Mapping[str, float],
    ) -> None:
        """One AdamW step of every seed (see the module), in place."""
        beta1, beta2 = self.betas
        self.steps += 1
        correction1 = 1 - beta1**self.steps
        correction2_sqrt = (1 - beta2**self.steps) ** 0.5
        like = next(iter(params.values()))
        shrink = {g: _per_seed([1 - r * decays[g] for r in lr], like) for g, lr in rates.items()}
        sizes = {g: _per_seed([-r / correction1 for r in lr], like) for g, lr in rates.items()}
        for name, p in params.items():
            group = self.groups[name]
            g, m, v = grads[name], self.exp_avg[name], self.exp_avg_sq[name]
            if decays[group] != 0:
                p.mul_(_rows(shrink[group], p))
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / correction2_sqrt).add_(self.eps)
            p.add_(_rows(sizes[group], p) * m / denom)

    def state_dict(self) -> dict[str, object]:
        """The moments and the step count (tensors and an int: loadable with `weights_only`)."""
        return {"steps": self.steps, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.steps = int(state["steps"])  # type: ignore[call-overload]
        self.exp_avg = dict(state["exp_avg"])  # type: ignore[call-overload]
        self.exp_avg_sq = dict(state["exp_avg_sq"])  # type: ignore[call-overload]

    def keep(self, rows: Tensor) -> None:
        """Keep the seeds at `rows` only (the others have finished)."""
        self.exp_avg = {n: t[rows].clone() for n, t in self.exp_avg.items()}
        self.exp_avg_sq = {n: t[rows].clone() for n, t in self.exp_avg_sq.items()}

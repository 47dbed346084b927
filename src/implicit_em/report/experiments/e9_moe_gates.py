r"""E9 (C13): mixture-of-experts gates are responsibilities.

A 1-D piecewise-linear regression task (S segments of $x$, each with its own line) is fit
by K linear experts $o_i(x) = w_i x + c_i$ and a softmax gate $g(x)$ (a small MLP),
trained in two ways:

* `mixture`: the competitive loss
  $\ell = -\log\sum_i g_i(x)\,e^{-d_i}$ with $d_i = \tfrac12\lVert y - o_i(x)\rVert^2/\sigma^2$
  (`mixture_nll` with $\log\pi = \log g(x)$). Its gradients
  are $\partial\ell/\partial d_i = h_i$ and $\partial\ell/\partial\,\mathrm{logit}_i =
  g_i - h_i$, with the posterior responsibilities $h_i \propto g_i(x)\,e^{-d_i}$: each
  expert is fit to the points it is responsible for, and the gate is pulled towards $h$
  (the M-step of the gate);
* `blend`: the blended output $\hat y = \sum_i g_i(x)\,o_i(x)$ with the squared error
  $\tfrac12(y - \hat y)^2$: no responsibility appears in its gradient.

Every fit (both objectives, EM and the rivals) starts from the same experts, the k-means start
(one least-squares line per k-means cluster of the training points), and measures distances in
units of a fixed noise scale, $d_i = \tfrac12(y - o_i)^2/\sigma^2$.

Purity is the share of points whose gate argmax is the expert matched to their segment (best
one-to-one matching of segments to experts); a seed *specialises* when its purity is at least
`SPECIALIZED` (0.9), and each arm is read as the share of seeds that specialise, with its exact
interval. The gate's distance from the responsibilities is $\mathrm{KL}(h \,\Vert\, g)$
averaged over inputs.

A third part (`_topk_part`) trains a small transformer whose feed-forward layer is a top-$k$
mixture of experts, as practitioners train one (cross-entropy plus the Switch balancing loss),
and reads whether its experts specialise, against the same model with its router frozen.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from implicit_em.report.experiments._cells import interval_cell
from implicit_em.report.experiments._expert_training import (
    OBJECTIVES,
    train,
)
from implicit_em.report.experiments._moe_em import BASELINES, baseline
from implicit_em.report.experiments._neural import (
    mean_std,
    plus_minus,
)
from implicit_em.report.experiments._topk_part import TOPK_CONTROLS, topk_readings, topk_units
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.judging.stats import modes, share_interval
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table

COLORS = ("#0969da", "#cf222e", "#1a7f37", "#bf8700", "#8250df", "#57606a")
SPECIALIZED = 0.9
"""A seed specialises when its matched purity is at least this."""
MODES_GAP = 0.125
"""Purity gap that separates modes (one expert covering two segments costs 0.25)."""


def specialized(purity: float) -> float:
    """1.0 when a seed's matched purity reaches `SPECIALIZED`, else 0.0."""
    return float(purity >= SPECIALIZED)


def share_cell(flags: list[float]) -> str:
    """`"k/n [low, high]"`: seeds that specialise, with the exact Clopper–Pearson 95% interval."""
    i = share_interval(int(sum(flags)), len(flags), "clopper-pearson")
    return f"{int(sum(flags))}/{len(flags)} [{i.low:.2f}, {i.high:.2f}]"


def modes_line(label: str, values: list[float]) -> str:
    """One arm's purity modes: count and mean of each (gap `MODES_GAP`)."""
    parts = [f"{m.count} seed(s) at {m.mean:.3f}" for m in modes(values, MODES_GAP)]
    return f"{label}: " + "; ".join(parts)


def purity_gap_em(mixture: dict[str, Any], em: dict[str, Any]) -> float:
    """The gate's matched purity under gradient descent on the mixture loss minus under EM
    from the same start (one seed)."""
    return mixture["purity"] - em["purity"]


def owner_purity_gap_gate_free(mixture: dict[str, Any], gate_free: dict[str, Any]) -> float:
    """The responsibilities' matched purity without a gate minus with the learned gate (one
    seed): how much routing the gate adds to what the responsibilities route alone."""
    return gate_free["owner_purity"] - mixture["owner_purity"]


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per objective and seed (a mixture of experts trained), one per baseline and
    seed."""
    seeds = config["seeds"]
    return (
        [
            Unit(f"{o}-seed{s}", train, {"objective": o, "seed": s, "config": config})
            for o in OBJECTIVES
            for s in seeds
        ]
        + [
            Unit(f"{k}-seed{s}", baseline, {"kind": k, "seed": s, "config": config})
            for k in BASELINES
            for s in seeds
        ]
        + topk_units(config)
    )


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    seeds = config["seeds"]
    runs = {o: [results[f"{o}-seed{s}"] for s in seeds] for o in OBJECTIVES}
    fitted = {k: [results[f"{k}-seed{s}"] for s in seeds] for k in BASELINES}
    numbers: dict[str, Any] = {
        "segments": len(config["slopes"]),
        "experts": config["experts"],
        "seeds": len(seeds),
        "steps": config["steps"],
    }
    rows = []
    for objective, label in OBJECTIVES.items():
        per_seed = {
            k: [r[k] for r in runs[objective]]
            for k in ("purity", "owner_purity", "kl", "mse_routed", "mse_blend", "gate_entropy")
        }
        for key, values in per_seed.items():
            numbers[f"{key}_{objective}"], numbers[f"{key}_{objective}_std"] = mean_std(values)
        flags = [specialized(p) for p in per_seed["purity"]]
        numbers[f"specialized_seed_share_{objective}"] = float(np.mean(flags))
        rows.append(
            (
                label,
                plus_minus(per_seed["purity"]),
                share_cell(flags),
                share_cell([specialized(p) for p in per_seed["owner_purity"]]),
                plus_minus(per_seed["kl"], 4),
                plus_minus(per_seed["gate_entropy"]),
                plus_minus(per_seed["mse_routed"]),
                plus_minus(per_seed["mse_blend"]),
            )
        )
    numbers["gate_gradient_residual"] = max(r["gate_gradient_residual"] for r in runs["mixture"])
    numbers["trace_agreement"] = max(r["trace_agreement"] for r in runs["mixture"])
    numbers["trace_residual"] = max(r["trace_residual"] for r in runs["mixture"])
    numbers["alarms_mixture"] = sorted({a for r in runs["mixture"] for a in r["alarms"]})
    flagged = [bool(r["alarms"]) for r in runs["mixture"]]
    failed = [r["purity"] < SPECIALIZED for r in runs["mixture"]]
    numbers["alarm_seeds_mixture"] = sum(flagged)
    numbers["alarm_marks_failure"] = float(
        np.mean([f == g for f, g in zip(flagged, failed, strict=True)])
    )
    notes = [
        f"Mixture loss: matched purity {numbers['purity_mixture']:.3f}, KL(h‖g) "
        f"{numbers['kl_mixture']:.4f} nats; blend: purity {numbers['purity_blend']:.3f}, KL(h‖g) "
        f"{numbers['kl_blend']:.4f} nats, gate entropy {numbers['gate_entropy_blend']:.3f} against "
        f"{numbers['gate_entropy_mixture']:.3f} nats.",
        f"The tracer's per-expert mass (read from ∂ℓ/∂d at the mixture site) matches the mean of "
        f"the responsibilities read here from the same gradient to "
        f"{numbers['trace_agreement']:.1e}; its identity residual is at most "
        f"{numbers['trace_residual']:.1e}; alarms on the mixture loss: "
        + (", ".join(numbers["alarms_mixture"]) or "none")
        + f" (in {sum(flagged)} of {len(seeds)} seeds).",
        f"Seeds whose gate did not specialize (purity < 0.9): {sum(failed)} of {len(seeds)}; the "
        f"tracer's alarms fired exactly on those seeds in {numbers['alarm_marks_failure']:.0%} of "
        "the seeds (a dead expert is a collapsed component: one expert then covers two segments).",
    ]
    mixture = runs["mixture"]
    samples = {
        "specialized_mixture": [specialized(r["purity"]) for r in mixture],
        "owner_specialized_gate_free": [
            specialized(r["owner_purity"]) for r in fitted["gate_free"]
        ],
        "purity_gap_em": [purity_gap_em(a, b) for a, b in zip(mixture, fitted["em"], strict=True)],
        "owner_purity_gap_gate_free": [
            owner_purity_gap_gate_free(a, b)
            for a, b in zip(mixture, fitted["gate_free"], strict=True)
        ],
    }
    kl_gap_blend = [b["kl"] - a["kl"] for a, b in zip(mixture, runs["blend"], strict=True)]
    baseline_rows = []
    for kind, label in BASELINES.items():
        for key in ("purity", "owner_purity", "kl", "mse_routed", "sigma"):
            numbers[f"{key}_{kind}"] = float(np.mean([m[key] for m in fitted[kind]]))
        for key in ("purity", "owner_purity"):
            flags = [specialized(m[key]) for m in fitted[kind]]
            numbers[f"{key.replace('purity', 'specialized')}_seed_share_{kind}"] = float(
                np.mean(flags)
            )
        baseline_rows.append(
            (
                label,
                *(interval_cell([m[k] for m in fitted[kind]]) for k in BASELINE_COLUMNS),
                share_cell([specialized(m["purity"]) for m in fitted[kind]]),
                share_cell([specialized(m["owner_purity"]) for m in fitted[kind]]),
            )
        )
    for objective in OBJECTIVES:
        numbers[f"owner_specialized_seed_share_{objective}"] = float(
            np.mean([specialized(r["owner_purity"]) for r in runs[objective]])
        )
    notes.append(
        "Matched purity of the gate by mode (seeds split where sorted purities differ by more "
        f"than {MODES_GAP}): "
        + " | ".join(
            [modes_line(OBJECTIVES[o], [r["purity"] for r in runs[o]]) for o in OBJECTIVES]
            + [modes_line(BASELINES[k], [m["purity"] for m in fitted[k]]) for k in BASELINES]
        )
        + "."
    )
    for name in ("purity_gap_em", "owner_purity_gap_gate_free"):
        numbers[name] = float(np.mean(samples[name]))
    numbers["kl_gap_blend"] = float(np.mean(kl_gap_blend))
    notes.append(
        f"Against the baselines from the same k-means start (σ {config['sigma']}): EM's gate "
        f"purity {numbers['purity_em']:.3f} (learned σ {numbers['sigma_em']:.3f}, noise "
        f"{config['noise']}), the mixture loss with learnable σ {numbers['purity_sigma']:.3f} "
        f"(σ {numbers['sigma_sigma']:.3f}); without a gate the responsibilities route "
        f"{numbers['owner_purity_gate_free']:.3f} of the points to their segment's expert, "
        f"against {numbers['owner_purity_mixture']:.3f} with the learned gate."
    )
    topk_numbers, topk_samples, topk_table, topk_note = topk_readings(config, results)
    numbers.update(topk_numbers)
    samples.update(topk_samples)
    notes.append(topk_note)
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                f"{config['experts']} linear experts on {numbers['segments']} segments "
                f"({len(seeds)} seeds, mean ± std; test points)",
                (
                    "objective",
                    "matched purity of the gate",
                    "seeds whose gate specialises (purity ≥ 0.9) [95% exact]",
                    "seeds whose responsibilities specialise [95% exact]",
                    "KL(h ‖ g) (nats)",
                    "gate entropy (nats)",
                    "MSE, routed to argmax g",
                    "MSE, blended output",
                ),
                tuple(rows),
            ),
            Table(
                "Baselines from the same starts (test points; mean and 95% interval over seeds)",
                (
                    "model",
                    "matched purity of the gate",
                    "matched purity of the responsibilities",
                    "KL(h ‖ g) (nats)",
                    "MSE, routed",
                    "mean learned σ",
                    "seeds whose gate specialises [95% exact]",
                    "seeds whose responsibilities specialise [95% exact]",
                ),
                tuple(baseline_rows),
            ),
            topk_table,
        ],
        figures=[_figure(runs, out)],
        notes=notes,
    )


BASELINE_COLUMNS = ("purity", "owner_purity", "kl", "mse_routed", "sigma")


def _figure(runs: dict[str, list[dict[str, Any]]], out: Path) -> Figure:
    fig, axes = new_figure(ncols=3, width=4.6, height=3.5)
    for ax, objective in zip(axes[0][:2], OBJECTIVES, strict=True):
        first = runs[objective][0]
        ax.scatter(first["sample"]["x"], first["sample"]["y"], s=4, color="#d0d7de")
        grid = first["grid"]
        route = np.asarray(grid["route"])
        xs, ys = np.asarray(grid["x"]), np.asarray(grid["routed"])
        for expert in np.unique(route):
            mask = np.where(route == expert, ys, np.nan)
            ax.plot(xs, mask, color=COLORS[int(expert) % len(COLORS)], linewidth=2)
        ax.plot(xs, grid["blend"], color="black", linewidth=0.8, linestyle="--")
        ax.set_title(f"{OBJECTIVES[objective]} (seed 0)", fontsize=8)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    ax = axes[0][2]
    for objective, color in zip(OBJECTIVES, ("#1a7f37", "#cf222e"), strict=True):
        curve = torch.tensor([r["kl_curve"] for r in runs[objective]]).mean(0)
        ax.plot(range(len(curve)), curve.tolist(), color=color, label=OBJECTIVES[objective])
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("KL(h ‖ g) on the batch (nats)")
    ax.legend(fontsize=7)
    name = save(fig, out, "e9_moe.png")
    return Figure(
        name,
        "Left and middle: test points (grey), the prediction of the expert the gate picks "
        "(coloured by expert) and the blended output Σ g_i o_i (dashed). Right: KL of the gate "
        "from the posterior responsibilities during training (mean over seeds): read from ∂ℓ/∂d "
        "for the mixture loss, computed from the forward pass for the blend.",
    )


def _fit(arm: str, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """One control fit, computed once per arm, seed and configuration (controls share fits)."""
    return _cached_fit(arm, seed, json.dumps(config, sort_keys=True))


@functools.lru_cache(maxsize=128)
def _cached_fit(arm: str, seed: int, config: str) -> dict[str, Any]:
    c = json.loads(config)
    return train(arm, seed, c) if arm in OBJECTIVES else baseline(arm, seed, c)


def _specialized(arm: str, key: str) -> Callable[[dict[str, Any]], list[float]]:
    """Per seed: whether `arm`'s `key` purity (gate or responsibilities) specialises."""
    return lambda c: [specialized(_fit(arm, seed, c)[key]) for seed in c["seeds"]]


def _purity_gap_em(config: dict[str, Any]) -> list[float]:
    return [
        purity_gap_em(_fit("mixture", seed, config), _fit("em", seed, config))
        for seed in config["seeds"]
    ]


def _owner_purity_gap(rival: str) -> Callable[[dict[str, Any]], list[float]]:
    """Per seed: `rival`'s responsibilities' matched purity minus the gated mixture's."""
    return lambda c: [
        owner_purity_gap_gate_free(_fit("mixture", seed, c), _fit(rival, seed, c))
        for seed in c["seeds"]
    ]


def _planted(
    says: str, measure: Callable[[dict[str, Any]], list[float]], **changes: Any
) -> Control:
    """A control that runs `measure` on the control configuration with the experts started on
    the task's lines and `changes` applied."""
    return Control(says, lambda c: measure({**c, "planted_experts": True, **changes}))


_LEVELS = {"slopes": [0.0] * 4, "intercepts": [0.0, 3.0, 6.0, 9.0]}
"""Four segments at four levels: y alone names the segment."""
_BLEND = (
    "the same experts from the same k-means start on the same data, trained by the blended "
    "output under squared error (a gated model without the log-sum-exp competition)"
)

CONTROLS = {
    "specialized_mixture": Controls(
        positive=_planted(
            "experts started on the task's lines, gate learned by the mixture loss",
            _specialized("mixture", "purity"),
        ),
        negative=Control(_BLEND + ": its gate", _specialized("blend", "purity")),
    ),
    "owner_specialized_gate_free": Controls(
        positive=_planted(
            "experts started on the task's lines, trained by the mixture loss without a gate",
            _specialized("gate_free", "owner_purity"),
        ),
        negative=Control(_BLEND + ": its responsibilities", _specialized("blend", "owner_purity")),
    ),
    "purity_gap_em": Controls(
        positive=_planted(
            "four segments at four levels, experts started on them; gradient descent and EM "
            "both fit the gate",
            _purity_gap_em,
            **_LEVELS,
        ),
        negative=_planted(
            "the same start, but gradient descent stopped after one step while EM runs",
            _purity_gap_em,
            steps=1,
            **_LEVELS,
        ),
    ),
    "owner_purity_gap_gate_free": Controls(
        positive=_planted(
            "four segments at four levels (y names the segment), experts started on them; "
            "gated model given the true segment gate",
            _owner_purity_gap("gate_free"),
            planted_gate=True,
            **_LEVELS,
        ),
        negative=Control(_BLEND + ", in place of the gate-free model", _owner_purity_gap("blend")),
    ),
    **TOPK_CONTROLS,
}

EXPERIMENT = Experiment(
    id="E9",
    title="Mixture-of-experts gates are responsibilities",
    claims=("C13",),
    hypothesis=(
        "Trained by the competitive mixture loss, linear experts specialize to one segment "
        "each and the softmax gate converges to the posterior responsibilities; the blended "
        "squared-error objective has no such force. Gradient descent on the mixture loss routes "
        "as well as Jordan-Jacobs EM from the same start, and a model with no gate at all still "
        "routes the experts' updates through the responsibilities. In a small transformer "
        "whose feed-forward layer is a top-k mixture of experts, a router trained by the task's "
        "loss makes its experts specialise to the tokens' clusters; frozen, it does not."
    ),
    setup=(
        "x uniform on [-1, 1] in 4 equal segments with lines y = 2x + 4, -4x - 2, 3x + 1, "
        "-2x - 1 and noise 0.1; 4 linear experts and a softmax gate (1-32-4 tanh MLP), Adam "
        "(lr 1e-2), every fit from the same k-means start (one least-squares line per k-means "
        "cluster of the training points). Mixture loss −log Σ g_i exp(−½(y − o_i)²/σ²), σ = "
        "0.3, under the Tracer, the responsibilities h read from ∂ℓ/∂d; blend: "
        "½(y − Σ g_i o_i)²; gate-free: −log Σ exp(−½(y − o_i)²/σ²). Purity: share of test "
        "points whose gate (or responsibility) argmax is the expert matched to their segment "
        "(best one-to-one matching); a seed specialises at purity ≥ 0.9. Top-k part: a "
        "1-layer pre-LN transformer (width 32, 2 heads) whose feed-forward layer is a top-2 "
        "mixture of 8 one-hidden-layer experts, on sequences of 8 tokens each drawn from one "
        "of 8 Gaussian clusters in 16 dimensions with its own labelling rule; cross-entropy "
        "plus the Switch balancing loss (α = 1), Adam (lr 1e-2), 600 steps of 16 sequences; "
        "router trained, or frozen at its random start with its input detached; a seed "
        "specialises when each cluster's tokens go first to one expert (per-cluster purity, "
        "averaged over clusters) at least 0.9 of the time."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("owner_purity_gap_gate_free", "specialized_seed_share_mixture", "kl_mixture"),
    meaning={
        "holds": (
            "C13 holds on this task: without a gate the responsibilities still route each "
            "segment to one expert, the mixture loss's gate specializes, and gradient descent "
            "routes as well as EM from the same start; a trained top-k router makes a "
            "transformer's experts specialise."
        ),
        "partly": (
            "Part holds; the criteria not met say which: routing without a gate, the gate's "
            "specialization under the mixture loss, gradient descent against EM, or the "
            "top-k transformer's experts."
        ),
        "fails": (
            "Without a gate the routing is lost, the gate does not specialize, and gradient "
            "descent routes worse than EM: C13 is not borne out on this task."
        ),
    },
    minutes={"smoke": 0.1, "quick": 0.5, "full": 6.5},
    controls=CONTROLS,
)

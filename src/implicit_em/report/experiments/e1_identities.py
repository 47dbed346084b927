"""E1: the executable identities, as `implicit-em verify` runs them: gates by algebra.

Each identity of `implicit_em.identities` compares a closed form with autograd on random float64
inputs (one generator seed per seed of the protocol) and runs gradcheck on the package's
function. They hold by algebra, so they are gates and not criteria: a failure is a bug, and a
pass answers the items they verify `verified (algebra)`:

* C1 (§3.1): ∂L/∂d_j = −r_j for L = log Σ_j exp(−d_j) (`lse_gradient`);
* R4 (the sign): ∂/∂d_j[−log Σ_k exp(−d_k)] = +r_j and, for cross-entropy, 1[j=y] − r_j
  (`nll_gradient`, `cross_entropy_gradient`);
* C2 (§3.2): a parameter's gradient is the responsibility-weighted sum Σ_j r_j ∂d_j/∂θ
  (`attention_values`, `hopfield_query`, `volume_gradient`: values, a query and whitening
  factors, each updated in proportion to its responsibilities);
* R2 (attention's real gradients): ∂L/∂v_j = Σ_i α_ij g_i and the advantage law
  ∂L/∂s_ij = α_ij (a_ij − ā_i) (`attention_values`, `attention_scores`): the objection's
  statement is true, and is the derivation C5 needs;
* C5's "values receive responsibility-weighted updates" (`attention_values`).

Nothing here can come out either way, so the experiment holds exactly when every gate passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from implicit_em import identities
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table

RESPONSIBILITY_WEIGHTED = ("attention_values", "hopfield_query", "volume_gradient")
"""The identities whose closed form is a parameter gradient Σ_j r_j ∂d_j/∂θ (C2)."""
ATTENTION_GRADIENTS = ("attention_values", "attention_scores")
"""The identities stating attention's real gradients, values and scores (R2)."""
VALUE_UPDATES = ("attention_values",)
"""The identity stating that values receive responsibility-weighted updates (C5)."""


def _seed(seed: int) -> list[list[Any]]:
    return [
        [r.name, r.claims, r.max_abs_error, bool(r.gradcheck)]
        for r in identities.run_all(seed=seed)
    ]


def _worst(rows: list[tuple], keep) -> float:
    """The largest error among the rows whose (name, claims) `keep` accepts."""
    return max(row[3] for row in rows if keep(row[1], row[2]))


def _claims(claims: str) -> set[str]:
    return {c.strip() for c in claims.split(",")}


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per seed: every identity on that seed's random inputs."""
    return [Unit(f"identities-seed{seed}", _seed, {"seed": seed}) for seed in config["seeds"]]


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    rows, failed = [], 0
    for seed in config["seeds"]:
        for name, claims, error, ok in results[f"identities-seed{seed}"]:
            rows.append((seed, name, claims, error, "ok" if ok else "FAIL"))
            failed += not ok
    names = sorted({row[1] for row in rows})
    worst = {n: _worst(rows, lambda name, _, n=n: name == n) for n in names}
    fig, ax = new_figure(width=7.0, height=3.8)
    ax = ax[0, 0]
    ax.barh(names, [max(worst[n], 1e-18) for n in names], color="#4c72b0")
    ax.axvline(identities.TOLERANCE, color="#cf222e", linestyle="--", label="tolerance 1e-12")
    ax.set_xscale("log")
    ax.set_xlabel("max |closed form − autograd| (float64)")
    ax.legend(loc="lower right")
    figure = save(fig, out, "identities.png")
    return Outcome(
        numbers={
            "max_abs_error": max(worst.values()),
            "gradcheck_failures": failed,
            "c1_max_abs_error": _worst(rows, lambda _, claims: "C1" in _claims(claims)),
            "r4_max_abs_error": _worst(rows, lambda _, claims: "R4" in _claims(claims)),
            "c2_max_abs_error": _worst(rows, lambda name, _: name in RESPONSIBILITY_WEIGHTED),
            "r2_max_abs_error": _worst(rows, lambda name, _: name in ATTENTION_GRADIENTS),
            "c5_values_max_abs_error": _worst(rows, lambda name, _: name in VALUE_UPDATES),
            "identities": len(names),
            "seeds": len(config["seeds"]),
        },
        tables=[
            Table(
                "Identity checks (float64)",
                ("seed", "identity", "claims", "max abs error", "gradcheck"),
                tuple(rows),
            )
        ],
        figures=[
            Figure(
                figure,
                "Worst error of each identity over the seeds; the dashed line is the tolerance.",
            )
        ],
    )


EXPERIMENT = Experiment(
    id="E1",
    title="The executable identities",
    claims=("C1", "C2", "C5", "R2", "R4"),
    hypothesis=(
        "The identities the theory rests on hold to float64 rounding: ∂L/∂d = −r (C1), its "
        "signs under the minimized NLL and cross-entropy (R4), parameter gradients that are "
        "responsibility-weighted sums (C2), and attention's value and score gradients (R2; "
        "C5's value updates)."
    ),
    setup=(
        "Each identity of implicit_em.identities compares a closed form with autograd on random "
        "float64 inputs (one generator seed per seed) and runs torch.autograd.gradcheck on the "
        "package's function. Every check is a gate: algebra, which no data can move."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("max_abs_error", "gradcheck_failures", "c1_max_abs_error", "r4_max_abs_error"),
    meaning={
        "holds": (
            "Every identity holds to rounding: C1, C2 (the responsibility-weighted form of a "
            "gradient), R4's signs, R2's attention gradients and C5's value updates are "
            "verified by algebra. What they imply for training "
            "dynamics is for the other experiments to measure."
        ),
        "partly": "Not reachable: the rule has gates only (it holds or is invalid).",
        "fails": "Not reachable: the rule has gates only (it holds or is invalid).",
    },
    minutes={"smoke": 0.05, "quick": 0.1, "full": 0.1},
)

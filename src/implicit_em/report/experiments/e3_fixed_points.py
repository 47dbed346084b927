"""E3: are gradient descent's fixed points EM's (T3)?

Two objectives. (1) The Gaussian-mixture likelihood, with its log-det volume term:

From common starts, EM runs to convergence and gradient descent (and Adam) until the gradient of
the mean NLL falls below a stated tolerance (or a pass budget runs out). Their end points are
compared after matching components; separately, gradient descent is started *at* EM's optimum,
where a shared fixed point has zero gradient and gradient descent does not move. (2) The paper's
own objective, log-sum-exp over distances without a volume term (fixed bandwidth, learnable
means; `_lse_fixed_points`), on four clusters where it has local optima: from each of at least
ten random-row starts, EM and gradient descent run to their tolerance, and where gradient
descent lands is recorded: EM's fixed point from the same start, another stationary point, or
none within the budget.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from implicit_em.mixture.step_rules import make_step_rule
from implicit_em.report.experiments import _lse_fixed_points as lf
from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.experiments._competition import blobs
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.judging.readings import per_data_set
from implicit_em.report.rendering.figures import new_figure, save
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table


def run_to_stationary(
    fitter: str,
    start,
    x,
    learning_rate: float | None,
    tolerance: float,
    max_passes: int,
    check_every: int,
) -> tuple[Any, int, list[tuple[int, float]]]:
    """Step `fitter` until the gradient norm is below `tolerance`; return the end point, the
    passes taken, and the gradient norms seen (pass, norm)."""
    rule = make_step_rule(fitter, mx.REG_COVAR, learning_rate)
    mixture, norms = start, [(0, mx.gradient_norm(start, x))]
    for n in range(1, max_passes + 1):
        mixture, _ = mx.one_pass(rule, mixture, x)
        if n % check_every == 0 or n == max_passes:
            norms.append((n, mx.gradient_norm(mixture, x)))
            if norms[-1][1] < tolerance:
                return mixture, n, norms
    return mixture, max_passes, norms


def landing(
    config: dict[str, Any], fitter: str, start, x, em_end, em_log_likelihood: float
) -> dict[str, Any]:
    """Run `fitter` from `start` to its tolerance and compare its end with EM's end `em_end`
    (mean log-likelihood `em_log_likelihood`)."""
    lr = config[f"{fitter}_learning_rate"]
    settled = run_to_stationary(
        fitter,
        start,
        x,
        lr,
        config["gradient_tolerance"],
        config["max_passes"],
        config["check_every"],
    )
    return compared(config, settled, x, em_end, em_log_likelihood)


def compared(
    config: dict[str, Any], settled: tuple, x, em_end, em_log_likelihood: float
) -> dict[str, Any]:
    """Where a run's end (`run_to_stationary`'s result) lies against EM's end, after matching
    components: stationary, parameters and mean log-likelihood within the stated distances."""
    end, passes, norms = settled
    reached = norms[-1][1] < config["gradient_tolerance"]
    difference = mx.max_abs(mx.matched(end, em_end), em_end)
    ll_gap = mx.mean_log_likelihood(end, x) - em_log_likelihood
    return {
        "passes": passes,
        "norms": norms,
        "reached": reached,
        "difference": difference,
        "ll_gap": ll_gap,
        "same": reached
        and difference <= config["same_parameters"]
        and abs(ll_gap) <= config["same_log_likelihood"],
    }


def _start(config: dict[str, Any], seed: int, data: mx.Dataset) -> dict[str, Any]:
    """EM to convergence from one poor start, then gradient descent and Adam from the same start
    and gradient descent from EM's optimum."""
    start = mx.poor_start(data, seed)
    em_path, em_ll, _ = mx.path("em", start, data.x, config["em_passes"])
    em_end = em_path[-1]
    moved, _, _ = mx.path("gd", em_end, data.x, config["drift_passes"], config["gd_learning_rate"])
    return {
        "optimum_norm": mx.gradient_norm(em_end, data.x),
        "drift": mx.max_abs(moved[-1], em_end),
        **{f: landing(config, f, start, data.x, em_end, em_ll[-1]) for f in ("gd", "adam")},
    }


def _lse_data(config: dict[str, Any], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The four clusters and a start of four random rows."""
    x = blobs(config["lse_n"], 0)[0].double()
    generator = torch.Generator().manual_seed(seed)
    return x, x[torch.randperm(len(x), generator=generator)[:4]].clone()


def _lse_start(config: dict[str, Any], seed: int) -> dict[str, Any]:
    x, start = _lse_data(config, seed)
    return lf.compare_from_start(
        x,
        start,
        config["lse_bandwidth"],
        config["lse_tolerance"],
        config["lse_max_passes"],
        config["lse_same_means"],
    )


def _lse(
    config: dict[str, Any], results: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any], list[tuple]]:
    """The LSE-without-volume runs: per start, the counts by landing, and table rows."""
    runs = [results[f"lse-start{s}"] for s in range(config["lse_starts"])]
    landed = [r["landed"] for r in runs]
    numbers = {
        "lse_starts": len(runs),
        "lse_gd_same_share": float(np.mean([r["same"] for r in runs])),
        "lse_gd_other": landed.count("other"),
        "lse_gd_not_stationary": landed.count("not stationary"),
        "lse_gd_other_worse": sum(
            r["landed"] == "other" and r["gd_objective"] > r["em_objective"] for r in runs
        ),
        "lse_em_converged_share": float(np.mean([r["em_converged"] for r in runs])),
        "lse_distinct_em_optima": len({round(r["em_objective"], 6) for r in runs}),
    }
    rows = [
        (s, r["landed"], r["difference"], r["em_objective"], r["gd_objective"], r["gd_passes"])
        for s, r in enumerate(runs)
    ]
    return runs, numbers, rows


def _start_unit(config: dict[str, Any], seed: int, data: str) -> dict[str, Any]:
    """`_start` of one seed on the data set named `data`."""
    return _start(config, seed, mx.dataset(data, config["n_synthetic"], seed))


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per seed and data set (the mixture runs), one per LSE start."""
    return mx.start_units(config, _start_unit) + [
        Unit(f"lse-start{s}", _lse_start, {"config": config, "seed": s})
        for s in range(config["lse_starts"])
    ]


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    tol = config["gradient_tolerance"]
    rows, curves = [], {}
    same, stationary, optimum_norms, drifts = [], [], [], []
    for seed, name in mx.start_names(config["seeds"]):
        measured = results[f"{name}-seed{seed}"]
        optimum_norms.append(measured["optimum_norm"])
        drifts.append(measured["drift"])
        for fitter in ("gd", "adam"):
            m = measured[fitter]
            if fitter == "gd":
                stationary.append(m["reached"])
                same.append(m["same"])
            rows.append(
                (
                    name,
                    seed,
                    fitter,
                    m["passes"],
                    m["norms"][-1][1],
                    "yes" if m["reached"] else "no",
                    m["difference"],
                    m["ll_gap"],
                    "yes" if m["same"] else "no",
                )
            )
            if seed == config["seeds"][0]:
                curves[(name, fitter)] = m["norms"]
    gd_runs = len(same)
    numbers = {
        "em_optimum_gradient_norm": max(optimum_norms),
        "gd_drift_from_em_optimum": max(drifts),
        "gd_stationary_share": sum(stationary) / gd_runs,
        "gd_same_fixed_point_share": sum(same) / gd_runs,
        "adam_stationary_share": sum(r[5] == "yes" for r in rows if r[2] == "adam") / gd_runs,
        "starts": gd_runs,
        "gradient_tolerance": tol,
    }
    lse_runs, lse_numbers, lse_rows = _lse(config, results)
    numbers.update(lse_numbers)
    fig, axes = new_figure(width=6.0, height=3.6)
    ax = axes[0, 0]
    for (name, fitter), norms in curves.items():
        passes, values = zip(*norms, strict=True)
        ax.semilogy(
            passes,
            np.maximum(values, 1e-17),
            "-" if fitter == "gd" else "--",
            label=f"{name}, {fitter}",
        )
    ax.axhline(tol, color="#cf222e", linestyle=":", label=f"tolerance {tol:g}")
    ax.set_xlabel("pass")
    ax.set_ylabel("‖∇ mean NLL‖")
    ax.legend(fontsize=7)
    figure = save(fig, out, "gradient_norms.png")
    notes = [
        f"At EM's converged parameters the gradient norm is at most {numbers['em_optimum_gradient_norm']:.2e}, "
        f"and {config['drift_passes']} gradient steps from there move the parameters by at most "
        f"{numbers['gd_drift_from_em_optimum']:.2e}. Plain gradient descent reached the tolerance on "
        f"{numbers['gd_stationary_share']:.0%} of the starts and EM's fixed point on "
        f"{numbers['gd_same_fixed_point_share']:.0%}; Adam at a constant learning rate reached it on "
        f"{numbers['adam_stationary_share']:.0%}.",
        f"LSE without volume (four clusters, bandwidth {config['lse_bandwidth']:g}): EM "
        f"converged on {numbers['lse_em_converged_share']:.0%} of {numbers['lse_starts']} starts, "
        f"at {numbers['lse_distinct_em_optima']} distinct objective values (local optima); "
        f"gradient descent reached EM's fixed point from the same start on "
        f"{numbers['lse_gd_same_share']:.0%}, another stationary point on "
        f"{numbers['lse_gd_other']} ({numbers['lse_gd_other_worse']} of them worse than EM's) "
        f"and none within the budget on {numbers['lse_gd_not_stationary']}.",
    ]
    return Outcome(
        numbers=numbers,
        samples={
            **per_data_set(
                {"gd_same_fixed_point_share": [float(v) for v in same]},
                [d.name for _, d in mx.starts(config["seeds"], config["n_synthetic"])],
            ),
            "lse_gd_same_share": [r["same"] for r in lse_runs],
        },
        tables=[
            Table(
                "End points against EM's (matched components)",
                (
                    "data",
                    "seed",
                    "fitter",
                    "passes",
                    "‖∇‖ at end",
                    "stationary",
                    "max |θ − θ_EM|",
                    "log-lik − EM's",
                    "EM's fixed point",
                ),
                tuple(rows),
            ),
            Table(
                "LSE over distances without volume: where gradient descent lands, per start",
                ("start", "GD landed", "max |μ − μ_EM|", "EM objective", "GD objective", "passes"),
                tuple(lse_rows),
            ),
        ],
        figures=[
            Figure(
                figure,
                "Gradient norm of the mean NLL along each gradient fitter's run (first seed); the dotted line is the tolerance.",
            )
        ],
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# Known-answer controls: gradient descent from next to EM's fixed point, compared with that
# fixed point (the same: planted) or with it moved by one unit (another: planted)
# ---------------------------------------------------------------------------------------------

NUDGE = 1e-3
"""How far (data units, every coordinate of every mean) the controls start from EM's fixed point."""


def _nudged(means: torch.Tensor, size: float, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return means + size * torch.randn(means.shape, generator=generator, dtype=means.dtype)


def _mixture_with_means(mixture, means: torch.Tensor):
    return type(mixture).from_covariances(
        mixture.model, mixture.weights, means, mixture.covariances
    )


@cache
def _settled_near_optima(config_json: str) -> list[tuple]:
    """Per start of the control configuration: the data, EM's optimum, its mean
    log-likelihood, and gradient descent run from it nudged by `NUDGE`."""
    config = json.loads(config_json)
    runs = []
    for seed, data in mx.starts(config["seeds"], config["n_synthetic"]):
        em_path, em_ll, _ = mx.path("em", mx.poor_start(data, seed), data.x, config["em_passes"])
        em_end = em_path[-1]
        start = _mixture_with_means(em_end, _nudged(em_end.means, NUDGE, seed))
        settled = run_to_stationary(
            "gd",
            start,
            data.x,
            config["gd_learning_rate"],
            config["gradient_tolerance"],
            config["max_passes"],
            config["check_every"],
        )
        runs.append((data, em_end, em_ll[-1], settled))
    return runs


def _gaussian_control(config: dict[str, Any], moved: float) -> list[float]:
    """Per start: gradient descent from EM's optimum nudged by `NUDGE`, judged against EM's
    optimum with every mean moved by `moved` (EM's fixed point on the data so translated)."""
    values = []
    for data, em_end, em_ll, settled in _settled_near_optima(json.dumps(config, sort_keys=True)):
        reference = _mixture_with_means(em_end, em_end.means + moved)
        values.append(float(compared(config, settled, data.x, reference, em_ll)["same"]))
    return values


def _lse_control(config: dict[str, Any], moved: float) -> list[float]:
    """Per start: on the LSE objective, gradient descent from EM's fixed point nudged by
    `NUDGE`, judged against that fixed point with every mean moved by `moved`."""
    bandwidth, tol = config["lse_bandwidth"], config["lse_tolerance"]
    values = []
    for seed in range(config["lse_starts"]):
        x, start = _lse_data(config, seed)
        em = lf.em_fixed_point(x, start, bandwidth, tol, config["lse_max_passes"])
        near = _nudged(em.means, NUDGE, seed)
        gd = lf.gd_fixed_point(x, near, bandwidth, tol, config["lse_max_passes"])
        reference = lf.FixedPoint(em.means + moved, em.passes, em.converged)
        values.append(lf.landing(x, reference, gd, bandwidth, config["lse_same_means"])["same"])
    return values


def _controls(measure) -> Controls:
    return Controls(
        positive=Control(
            f"gradient descent started {NUDGE:g} from EM's fixed point, judged against it",
            lambda c: measure(c, 0.0),
        ),
        negative=Control(
            "the same run judged against EM's fixed point moved by one unit",
            lambda c: measure(c, 1.0),
        ),
    )


CONTROLS = {
    "gd_same_fixed_point_share": _controls(_gaussian_control),
    "lse_gd_same_share": _controls(_lse_control),
}


EXPERIMENT = Experiment(
    id="E3",
    title="Fixed points: gradient descent against EM",
    claims=("T3", "C4"),
    hypothesis=(
        "Gradient descent and EM share their fixed points on a Gaussian mixture: EM's optimum "
        "is stationary for gradient descent, and gradient descent from EM's start ends there; "
        "the same on the paper's LSE over distances without a volume term, where local optima "
        "exist."
    ),
    setup=(
        "Full-covariance mixtures, K = 3, float64, on the known 2-D mixture and on wine (PCA "
        "2-D), from poor common starts. EM runs a fixed number of passes (to convergence); "
        "plain GD and Adam run until ‖∇ mean NLL‖ over their parameters (logits, means, "
        "whitening factors) is below the tolerance or the pass budget ends. Same fixed point: "
        "stationary, parameters within the stated distance and mean log-likelihood within the "
        "stated gap of EM's, after matching components."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=("em_optimum_gradient_norm", "gd_same_fixed_point_share", "gd_stationary_share"),
    meaning={
        "holds": (
            "Different paths (E2), same destinations: EM's fixed points are gradient descent's, "
            "as T3 asks and as both are stationary points of one likelihood. C4's 'fixed points "
            "are governed by the same responsibilities' holds; it says nothing about which "
            "fixed point a given start reaches."
        ),
        "partly": (
            "On one objective gradient descent reaches EM's fixed points and on the other not: "
            "the criteria say whether the full likelihood or the LSE without volume."
        ),
        "fails": (
            "EM's optimum is stationary for gradient descent (the gates), but gradient descent "
            "from the same start does not reliably get there within its budget (slow "
            "convergence or another local optimum): shared fixed points, not shared basins."
        ),
    },
    minutes={"smoke": 0.1, "quick": 0.3, "full": 1.5},
    controls=CONTROLS,
)

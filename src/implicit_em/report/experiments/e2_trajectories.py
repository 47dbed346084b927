"""E2: do gradient-descent trajectories on the mixture NLL follow EM's (R1, T2)?

From one start, EM, plain gradient descent at several learning rates, Adam and Xu-Jordan
preconditioned gradient descent each take their steps on a Gaussian mixture (full covariances).
Two measurements per fitter: the distance of its path to EM's path, pass by pass; and, at every
step, how much of EM's step from the *same* parameters is left unexplained once the best scalar
step size for that step is fitted:

    residual_t = min_eta ||Delta_EM(theta_t) - eta * Delta_F(theta_t)|| / ||Delta_EM(theta_t)||

over the natural parameters (weights, means, covariances). A residual of 0 means the fitter's
step is EM's up to a step size; the referee's T2 asks whether it is.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.figures import new_figure, save
from implicit_em.report.progress import progress
from implicit_em.report.registry import Experiment, Figure, Outcome, Table
from implicit_em.report.units import unit

_COLOURS = {"em": "black", "preconditioned": "#d62728", "adam": "#9467bd"}


def step_residuals(mixtures: list, x) -> list[float]:
    """Per step of a path: the share of EM's step (from the same point) left after the best scalar fit."""
    residuals = []
    for before, after in itertools.pairwise(mixtures):
        em = mx.flat(mx.em_step(before, x)) - mx.flat(before)
        own = mx.flat(after) - mx.flat(before)
        em_norm, own_sq = float(em.norm()), float(own @ own)
        if em_norm < 1e-9 or own_sq == 0.0:
            continue  # EM has converged here: no step left to explain
        eta = float(em @ own) / own_sq
        residuals.append(float((em - eta * own).norm()) / em_norm)
    return residuals


def _fitters(config: dict[str, Any]) -> list[tuple[str, str, float | None]]:
    fitters = [("em", "em", None), ("preconditioned", "preconditioned", None)]
    fitters += [(f"gd lr={lr:g}", "gd", lr) for lr in config["gd_learning_rates"]]
    fitters += [(f"adam lr={lr:g}", "adam", lr) for lr in config["adam_learning_rates"]]
    return fitters


def _start(config: dict[str, Any], seed: int, data: mx.Dataset) -> dict[str, Any]:
    """Every fitter's path from one poor start on one data set, against EM's path."""
    start = mx.poor_start(data, seed)
    em_path, _, _ = mx.path("em", start, data.x, config["passes"])
    measured = {}
    for label, fitter, lr in _fitters(config):
        mixtures, log_likelihoods, diverged = mx.path(fitter, start, data.x, config["passes"], lr)
        deviation = [mx.max_abs(m, e) for m, e in zip(mixtures, em_path, strict=False)]
        residuals = step_residuals(mixtures, data.x) if fitter != "em" else [0.0]
        measured[label] = {
            "final_log_likelihood": log_likelihoods[-1],
            "max_deviation": max(deviation),
            "median_residual": float(np.median(residuals)) if residuals else float("nan"),
            "max_residual": float(np.max(residuals)) if residuals else float("nan"),
            "diverged": diverged,
            "log_likelihoods": log_likelihoods,
            "deviation": deviation,
        }
    return measured


def run(config: dict[str, Any], out: Path) -> Outcome:
    fitters = _fitters(config)
    rows, curves = [], {}
    residual_by: dict[str, list[float]] = {label: [] for label, _, _ in fitters}
    deviation_by: dict[str, list[float]] = {label: [] for label, _, _ in fitters}
    for seed, data in progress(mx.starts(config["seeds"], config["n_synthetic"]), desc="E2"):
        measured = unit(f"{data.name}-seed{seed}", lambda s=seed, d=data: _start(config, s, d))
        for label, entry in measured.items():
            deviation_by[label].append(entry["max_deviation"])
            residual_by[label].append(entry["median_residual"])
            rows.append(
                (
                    data.name,
                    seed,
                    label,
                    entry["final_log_likelihood"],
                    entry["max_deviation"],
                    entry["median_residual"],
                    entry["max_residual"],
                    "yes" if entry["diverged"] else "no",
                )
            )
            if seed == config["seeds"][0]:
                curves[(data.name, label)] = (entry["log_likelihoods"], entry["deviation"])
    gd_labels = [label for label, fitter, _ in fitters if fitter == "gd"]
    adam_labels = [label for label, fitter, _ in fitters if fitter == "adam"]
    # Per start, the learning rate that explains EM's steps best (the most generous reading).
    gd_samples = [
        mx.finite(min, list(v)) for v in zip(*(residual_by[la] for la in gd_labels), strict=True)
    ]
    adam_samples = [
        mx.finite(min, list(v)) for v in zip(*(residual_by[la] for la in adam_labels), strict=True)
    ]
    gd_residual, adam_residual = float(np.mean(gd_samples)), float(np.mean(adam_samples))
    numbers = {
        "preconditioned_max_deviation": max(deviation_by["preconditioned"]),
        "preconditioned_median_residual": mx.finite(max, residual_by["preconditioned"]),
        "gd_best_median_residual": gd_residual,
        "adam_best_median_residual": adam_residual,
        "gd_min_max_deviation": min(max(deviation_by[label]) for label in gd_labels),
        "passes": config["passes"],
        "seeds": len(config["seeds"]),
    }
    samples = {"gd_best_median_residual": gd_samples, "adam_best_median_residual": adam_samples}
    figure = _plot(curves, out)
    notes = [
        f"Preconditioned steps stay within {numbers['preconditioned_max_deviation']:.2e} of EM's "
        f"parameters over {config['passes']} passes. With the best learning rate, plain gradient "
        f"descent still leaves a median {gd_residual:.1%} of EM's step unexplained by any scalar "
        f"step size (Adam: {adam_residual:.1%}): the step's direction differs, not only its length."
    ]
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                "Per data set, start and fitter (natural parameters, full covariances)",
                (
                    "data",
                    "seed",
                    "fitter",
                    "final mean log-lik",
                    "max |θ − θ_EM| on the path",
                    "median step residual",
                    "max step residual",
                    "diverged",
                ),
                tuple(rows),
            )
        ],
        figures=[
            Figure(
                figure,
                "Left: mean log-likelihood per pass. Right: largest parameter difference from EM's "
                "path at the same pass (log scale). Preconditioned GD lies on EM's path to rounding.",
            )
        ],
        notes=notes,
    )


def _plot(curves: dict, out: Path) -> str:
    names = sorted({name for name, _ in curves})
    fig, axes = new_figure(ncols=2, nrows=len(names), width=5.2, height=3.4)
    palette = ["#1f77b4", "#2ca02c", "#ff7f0e", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f"]
    colours: dict[str, str] = {}
    for row, name in enumerate(names):
        for (data, label), (log_likelihoods, deviation) in curves.items():
            if data != name:
                continue
            fallback = palette[len(colours) % len(palette)]
            colour = colours.setdefault(label, _COLOURS.get(label.split(" ")[0], fallback))
            style = "--" if label == "preconditioned" else "-"
            axes[row, 0].plot(log_likelihoods, style, color=colour, label=label)
            axes[row, 1].semilogy(np.maximum(deviation, 1e-17), style, color=colour, label=label)
        axes[row, 0].set_title(f"{name}: mean log-likelihood")
        axes[row, 1].set_title(f"{name}: max |θ − θ_EM| at the same pass")
        for ax in axes[row]:
            ax.set_xlabel("pass")
    axes[0, 1].legend(fontsize=7, loc="lower right")
    return save(fig, out, "trajectories.png")


EXPERIMENT = Experiment(
    id="E2",
    title="Trajectories: gradient descent against EM",
    claims=("C2", "C4", "R1", "T2"),
    hypothesis=(
        "Gradient descent on the mixture NLL takes EM's steps up to a step size; the referee "
        "expects this only for Xu–Jordan's preconditioned steps."
    ),
    setup=(
        "Full-covariance Gaussian mixtures, K = 3, float64, from a poor common start (random "
        "rows as means, the data covariance, uniform weights): a known 3-component 2-D "
        "mixture and the bundled wine data (standardized, PCA to 2-D). EM, preconditioned GD, "
        "plain GD at several learning rates and Adam, each for a fixed number of full passes. "
        "Step residual: the share of EM's step from the same parameters not explained by the "
        "best scalar multiple of the fitter's step (median over the steps before EM "
        "converges); for GD and Adam the best learning rate and the worst start are reported."
    ),
    run=run,
    headline=(
        "preconditioned_max_deviation",
        "gd_best_median_residual",
        "adam_best_median_residual",
    ),
    meaning={
        "holds": "Gradient descent is EM up to a step size: R1 would be answered.",
        "partly": (
            "One of plain GD and Adam takes EM's steps up to a step size and the other does not: "
            "'GD is EM' depends on the optimizer."
        ),
        "fails": (
            "Only the preconditioned steps are EM's (the gate): plain GD and Adam weight each "
            "point by its responsibility, as C2 says, but their steps point elsewhere than EM's "
            "M-step, by more than any step size explains. R1 stands; C4's 'paths follow EM' is "
            "not borne out. 'GD performs EM' is true of the E-step's responsibilities, not of "
            "the M-step."
        ),
    },
    minutes={"smoke": 0.05, "quick": 1.2, "full": 1.2},
)

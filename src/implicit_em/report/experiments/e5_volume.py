"""E5: the volume term: Gaussian components with learnable whitening, with and without log|det W| (C9, m1).

Each component has a mean mu_j and a lower-triangular whitening factor W_j
(`FullMahalanobis`), d_tj = 1/2 ||W_j (x_t - mu_j)||^2, and mixing
logits. Full-batch Adam on

(a) the mixture NLL alone,          -log sum_j pi_j exp(-d_tj)                 (no volume term)
(b) the Gaussian mixture NLL,       -log sum_j pi_j exp(-d_tj + log|det W_j|)  (the volume term)
(c) (a) plus the variance and decorrelation surrogates of the log-det
    (`VolumeSurrogate`).

The Tracer watches each run and its collapse alarms are reported.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from implicit_em import objectives
from implicit_em.distances import FullMahalanobis
from implicit_em.mixture import GaussianMixture
from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.figures import new_figure, save
from implicit_em.report.progress import progress
from implicit_em.report.registry import Experiment, Figure, Outcome, Table
from implicit_em.report.units import unit
from implicit_em.trace import CollapseWarning, Tracer

CONFIGURATIONS = ("no volume", "log-det volume", "surrogate")
_LOG_2PI = float(np.log(2 * np.pi))


class Components(torch.nn.Module):
    """Means, whitening factors and mixing logits of K Gaussian components."""

    def __init__(self, start: torch.Tensor) -> None:
        super().__init__()
        k, dim = start.shape
        self.distance = FullMahalanobis(dim, k)
        with torch.no_grad():
            self.distance.means.copy_(start)
        self.logits = torch.nn.Parameter(torch.zeros(k))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.distance(x)

    def log_prior(self) -> torch.Tensor:
        return torch.log_softmax(self.logits, dim=0)

    def gaussian_log_likelihood(self, x: torch.Tensor) -> float:
        """Mean log-likelihood of `x` under the Gaussian mixture these parameters define."""
        d = self(x)
        log_p = (
            torch.logsumexp(self.log_prior() - d + self.distance.log_det(), dim=1)
            - 0.5 * x.shape[1] * _LOG_2PI
        )
        return float(log_p.mean())


def objective(
    name: str, model: Components, x: torch.Tensor, surrogate_weight: float
) -> torch.Tensor:
    d = model(x)
    if name == "no volume":
        return objectives.mixture_nll(d, log_prior=model.log_prior())
    if name == "log-det volume":
        return objectives.mixture_nll(
            d, log_prior=model.log_prior(), log_det=model.distance.log_det()
        )
    if name == "surrogate":
        surrogate = objectives.variance_penalty(d) + objectives.decorrelation_penalty(d)
        return objectives.mixture_nll(d, log_prior=model.log_prior()) + surrogate_weight * surrogate
    raise ValueError(f"unknown configuration {name!r}")


def train(
    name: str, x: torch.Tensor, start: torch.Tensor, config: dict[str, Any]
) -> tuple[Components, dict[str, list[float]], list[str], int | None]:
    """Train one configuration under the Tracer: its curves, the alarms that fired, and the step
    at which the loss stopped being finite (None if it never did; training stops there)."""
    torch.manual_seed(0)
    model = Components(start)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    curves: dict[str, list[float]] = {"log_det": [], "gaussian_log_likelihood": [], "max_share": []}
    diverged = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollapseWarning)
        with Tracer(None, every=config["trace_every"]) as tracer:
            for step in range(config["steps"]):
                loss = objective(name, model, x, config["surrogate_weight"])
                if not torch.isfinite(loss):
                    diverged = step
                    break
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                tracer.step()
                if step % config["record_every"] == 0 or step == config["steps"] - 1:
                    with torch.no_grad():
                        r = torch.softmax(model.log_prior() - model(x), dim=1)
                        curves["log_det"].append(float(model.distance.log_det().mean()))
                        curves["gaussian_log_likelihood"].append(model.gaussian_log_likelihood(x))
                        curves["max_share"].append(float(r.mean(0).max()))
    alarms = sorted({a["alarm"] for a in tracer.alarms})
    return model, curves, alarms, diverged


def em_optimum(data: mx.Dataset, start: torch.Tensor) -> float:
    """EM's mean log-likelihood from the same means (scikit-learn's convention: full covariances)."""
    gm = GaussianMixture(
        data.n_components,
        covariance_type="full",
        means_init=start.numpy(),
        max_iter=500,
        tol=1e-10,
        reg_covar=1e-6,
        random_state=0,
    )
    return float(gm.fit(data.x.numpy()).score(data.x.numpy()))


TAKEOVER = 0.1
"""The takeover criterion: the gain in the largest mass share that counts as taking over."""


def _start(config: dict[str, Any], seed: int, data: mx.Dataset) -> dict[str, Any]:
    """Every configuration from one seed's means on one data set, and EM's optimum from them."""
    x = data.x.float()
    generator = torch.Generator().manual_seed(seed)
    start = x[torch.randperm(len(x), generator=generator)[: data.n_components]].clone()
    measured: dict[str, Any] = {"reference": em_optimum(data, start.double())}
    for name in CONFIGURATIONS:
        _, curves, alarms, diverged = train(name, x, start, config)
        measured[name] = {"curves": curves, "alarms": list(alarms), "diverged": diverged}
    return measured


def run(config: dict[str, Any], out: Path) -> Outcome:
    rows, curves_first = [], {}
    per: dict[str, dict[str, list[float]]] = {
        name: {"alarms": [], "gap": [], "share": [], "log_det_drop": [], "diverged": []}
        for name in CONFIGURATIONS
    }
    unit_samples: dict[str, list[float]] = {
        "no": [],
        "volume": [],
        "reaches": [],
        "takeover": [],
        "diverged": [],
    }
    for seed, data in progress(mx.starts(config["seeds"], config["n_synthetic"]), desc="E5"):
        measured = unit(f"{data.name}-seed{seed}", lambda s=seed, d=data: _start(config, s, d))
        reference = measured["reference"]
        unit_samples["no"].append(float(len(measured["no volume"]["alarms"]) > 0))
        unit_samples["volume"].append(float(len(measured["log-det volume"]["alarms"]) > 0))
        healthy = measured["log-det volume"]
        unit_samples["reaches"].append(
            float(
                healthy["diverged"] is None
                and healthy["curves"]["gaussian_log_likelihood"][-1] - reference
                >= -config["em_gap"]
            )
        )
        # Takeover: the largest mass share at the end (the last recorded point before the loss
        # stopped being finite, if it did) without the volume term, against the log-det run.
        unit_samples["takeover"].append(
            mx.finite(lambda v: v[-1], measured["no volume"]["curves"]["max_share"])
            - mx.finite(lambda v: v[-1], healthy["curves"]["max_share"])
        )
        unit_samples["diverged"].append(float(measured["surrogate"]["diverged"] is not None))
        for name in CONFIGURATIONS:
            curves, alarms, diverged = (measured[name][k] for k in ("curves", "alarms", "diverged"))
            per[name]["alarms"].append(len(alarms))
            per[name]["diverged"].append(diverged is not None)
            if seed == config["seeds"][0]:
                curves_first[(data.name, name)] = curves
            if diverged is not None:
                rows.append(
                    (
                        data.name,
                        seed,
                        name,
                        "",
                        "",
                        "",
                        "",
                        ", ".join(alarms) or "none",
                        f"at step {diverged}",
                    )
                )
                continue
            gap = curves["gaussian_log_likelihood"][-1] - reference
            per[name]["gap"].append(gap)
            per[name]["share"].append(curves["max_share"][-1])
            per[name]["log_det_drop"].append(curves["log_det"][0] - curves["log_det"][-1])
            rows.append(
                (
                    data.name,
                    seed,
                    name,
                    curves["log_det"][-1],
                    curves["gaussian_log_likelihood"][-1],
                    gap,
                    curves["max_share"][-1],
                    ", ".join(alarms) or "none",
                    "no",
                )
            )
    numbers = {
        "no_volume_alarm_share": float(np.mean([a > 0 for a in per["no volume"]["alarms"]])),
        "volume_alarm_share": float(np.mean([a > 0 for a in per["log-det volume"]["alarms"]])),
        "surrogate_alarm_share": float(np.mean([a > 0 for a in per["surrogate"]["alarms"]])),
        "no_volume_log_det_drop": mx.finite(np.min, per["no volume"]["log_det_drop"]),
        "volume_reaches_em_share": float(
            np.mean([g >= -config["em_gap"] for g in per["log-det volume"]["gap"]])
        )
        if per["log-det volume"]["gap"]
        else float("nan"),
        "volume_worst_gap_to_em": mx.finite(np.min, per["log-det volume"]["gap"]),
        "no_volume_best_gap_to_em": mx.finite(np.max, per["no volume"]["gap"]),
        "surrogate_best_gap_to_em": mx.finite(np.max, per["surrogate"]["gap"]),
        "no_volume_max_share": mx.finite(np.mean, per["no volume"]["share"]),
        "volume_max_share": mx.finite(np.mean, per["log-det volume"]["share"]),
        "surrogate_diverged_share": float(np.mean(per["surrogate"]["diverged"])),
        "takeover_gain": float(np.mean(unit_samples["takeover"])),
        "volume_diverged_share": float(np.mean(per["log-det volume"]["diverged"])),
        "seeds": len(config["seeds"]),
    }
    figure = _plot(curves_first, config, out)
    notes = [
        f"Without the volume term the mean log|det W| falls by at least {numbers['no_volume_log_det_drop']:.1f} "
        f"and the fitted model's Gaussian log-likelihood ends at least {-numbers['no_volume_best_gap_to_em']:.2f} "
        f"nats per sample below EM's optimum; with it {numbers['volume_reaches_em_share']:.0%} of the runs end "
        f"within {config['em_gap']:g} of EM's optimum from the same means (worst gap "
        f"{numbers['volume_worst_gap_to_em']:.3g}). The surrogate's loss stopped being finite in "
        f"{numbers['surrogate_diverged_share']:.0%} of its runs: −log Var(d_j) is unbounded below once a "
        "component leaves the data (its distances grow without limit), so the surrogate alone does not "
        "bound the objective. "
        f"Runs with at least one tracer alarm: no volume {numbers['no_volume_alarm_share']:.0%}, "
        f"log-det volume {numbers['volume_alarm_share']:.0%}, surrogate {numbers['surrogate_alarm_share']:.0%}."
    ]
    return Outcome(
        numbers=numbers,
        samples={
            "no_volume_alarm_share": unit_samples["no"],
            "volume_alarm_share": unit_samples["volume"],
            "volume_reaches_em_share": unit_samples["reaches"],
            "takeover_gain": unit_samples["takeover"],
            "surrogate_diverged_share": unit_samples["diverged"],
        },
        tables=[
            Table(
                "End of training, per data set and seed",
                (
                    "data",
                    "seed",
                    "configuration",
                    "mean log|det W|",
                    "Gaussian mean log-lik",
                    "− EM's optimum",
                    "largest mass share",
                    "tracer alarms",
                    "loss not finite",
                ),
                tuple(rows),
            )
        ],
        figures=[
            Figure(
                figure,
                "Over training (first seed): mean log|det W| (scale of the whitening), Gaussian mean log-likelihood (EM's optimum dashed), and the largest component's share of the mass.",
            )
        ],
        notes=notes,
    )


def _plot(curves: dict, config: dict, out: Path) -> str:
    names = sorted({name for name, _ in curves})
    fig, axes = new_figure(ncols=3, nrows=len(names), width=3.8, height=3.0)
    colours = {"no volume": "#d62728", "log-det volume": "#1f77b4", "surrogate": "#2ca02c"}
    for row, data_name in enumerate(names):
        for name in CONFIGURATIONS:
            c = curves.get((data_name, name))
            if c is None or not c["log_det"]:
                continue
            steps = np.arange(len(c["log_det"])) * config["record_every"]
            axes[row, 0].plot(steps, c["log_det"], color=colours[name], label=name)
            axes[row, 1].plot(
                steps, np.maximum(c["gaussian_log_likelihood"], -20), color=colours[name]
            )
            axes[row, 2].plot(steps, c["max_share"], color=colours[name])
        axes[row, 0].set_title(f"{data_name}: mean log|det W|", fontsize=9)
        axes[row, 1].set_title(f"{data_name}: Gaussian mean log-lik (clipped at −20)", fontsize=9)
        axes[row, 2].set_title(f"{data_name}: largest mass share", fontsize=9)
        for ax in axes[row]:
            ax.set_xlabel("step")
    axes[0, 0].legend(fontsize=7)
    return save(fig, out, "volume.png")


EXPERIMENT = Experiment(
    id="E5",
    title="Volume: whitened components with and without log|det W|",
    claims=("C9", "C14a", "C14d", "m1"),
    hypothesis=(
        "Without the log-det volume term, learnable whitening collapses (the scale of W "
        "shrinks, the true-model likelihood degrades) and the tracer's collapse alarms fire; "
        "with it, gradient descent reaches EM's optimum and the alarms stay silent. Without "
        "it one component takes over the mass; the batch surrogate does not bound the loss."
    ),
    setup=(
        "K = 3 full-covariance components (means from random rows, W = I, uniform logits), "
        "full-batch Adam in float32 on the known 2-D mixture and on wine (PCA 2-D); the "
        "surrogate adds −Σ_j log Var(d_j) + ‖Corr(d) − I‖²_F. EM's optimum: GaussianMixture "
        "from the same means. The Tracer (default thresholds) runs on every configuration."
    ),
    run=run,
    headline=(
        "no_volume_log_det_drop",
        "no_volume_alarm_share",
        "volume_alarm_share",
        "volume_reaches_em_share",
        "surrogate_diverged_share",
    ),
    meaning={
        "holds": (
            "C9 and m1 hold: the LSE over distances is not a Gaussian likelihood without its "
            "volume term, and gradient descent on it collapses; restoring log|det W| restores "
            "EM's optimum, and the tracer tells the two apart from the gradients alone (C14); "
            "a component takes over without it, and the surrogate lets the loss diverge."
        ),
        "partly": (
            "The collapse or its cure shows only in part; the criteria not met say whether the "
            "scale, the likelihood or the tracer's alarms disagree with C9."
        ),
        "fails": "No collapse without the volume term and no recovery with it: C9 is not borne out here.",
    },
    minutes={"smoke": 0.1, "quick": 1.5, "full": 3.0},
)

"""E5: the volume term: Gaussian components with learnable whitening, with and without log|det W| (C9, C14d, m1).

Each component has a mean mu_j and a lower-triangular whitening factor W_j
(`FullMahalanobis`), d_tj = 1/2 ||W_j (x_t - mu_j)||^2, and mixing
logits. Full-batch Adam on

(a) the mixture NLL alone,          -log sum_j pi_j exp(-d_tj)                 (no volume term)
(b) the Gaussian mixture NLL,       -log sum_j pi_j exp(-d_tj + log|det W_j|)  (the volume term)
(c) (a) plus the variance and decorrelation surrogates of the log-det
    (`VolumeSurrogate`).

The Tracer watches each run; whether its collapse alarms tell (a) from (b) is the C14d
criterion. The largest component's mass share and the surrogate's divergence are reported
without a vote: no planted start gives them a known answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from implicit_em import objectives
from implicit_em.distances import FullMahalanobis
from implicit_em.mixture import GaussianMixture
from implicit_em.report.experiments import _mixtures as mx
from implicit_em.report.experiments._neural import quiet_alarms
from implicit_em.report.experiments._volume_figure import (
    volume_figure,
)
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.judging.readings import per_data_set
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table
from implicit_em.trace import Tracer

CONFIGURATIONS = ("no volume", "log-det volume", "surrogate")
_LOG_2PI = float(np.log(2 * np.pi))


@dataclass(frozen=True)
class Start:
    """Where a training starts: the means `[K, D]`, and optionally the unconstrained whitening
    factors `[K, D, D]` of `FullMahalanobis` (identity factors when None) and the mixing logits
    `[K]` (uniform when None)."""

    means: torch.Tensor
    raw_factors: torch.Tensor | None = None
    logits: torch.Tensor | None = None


class Components(torch.nn.Module):
    """Means, whitening factors and mixing logits of K Gaussian components."""

    def __init__(self, start: Start) -> None:
        super().__init__()
        k, dim = start.means.shape
        self.distance = FullMahalanobis(dim, k)
        self.logits = torch.nn.Parameter(torch.zeros(k))
        with torch.no_grad():
            self.distance.means.copy_(start.means)
            if start.raw_factors is not None:
                self.distance.raw_factors.copy_(start.raw_factors)
            if start.logits is not None:
                self.logits.copy_(start.logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.distance(x)

    def log_prior(self) -> torch.Tensor:
        return torch.log_softmax(self.logits, dim=0)

    def gaussian_log_likelihood(self, x: torch.Tensor) -> float:
        """Mean log-likelihood of `x` under the Gaussian mixture these parameters define."""
        with torch.no_grad():
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


def train(name: str, x: torch.Tensor, start: Start, config: dict[str, Any]) -> dict[str, Any]:
    """Train one configuration under the Tracer: its curves, the alarms that fired, and the step
    at which the loss stopped being finite (None if it never did; training stops there).

    The curves are read with the tracer paused, so that the tracer sees the training loss
    alone."""
    torch.manual_seed(0)
    model = Components(start)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    curves: dict[str, list[float]] = {"log_det": [], "gaussian_log_likelihood": [], "max_share": []}
    diverged = None
    with quiet_alarms(), Tracer(None, every=config["trace_every"]) as tracer:
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
                with tracer.paused(), torch.no_grad():
                    r = torch.softmax(model.log_prior() - model(x), dim=1)
                    curves["log_det"].append(float(model.distance.log_det().mean()))
                    curves["gaussian_log_likelihood"].append(model.gaussian_log_likelihood(x))
                    curves["max_share"].append(float(r.mean(0).max()))
    alarms = sorted({a["alarm"] for a in tracer.alarms})
    return {"curves": curves, "alarms": alarms, "diverged": diverged}


def random_rows(data: mx.Dataset, seed: int) -> Start:
    """K distinct data rows drawn with `seed` as the means; identity whitening, uniform weights."""
    x = data.x.float()
    generator = torch.Generator().manual_seed(seed)
    return Start(x[torch.randperm(len(x), generator=generator)[: data.n_components]].clone())


def em_fit(data: mx.Dataset, start: Start) -> tuple[Start, float]:
    """EM (scikit-learn's convention: full covariances) from the same means: its parameters as a
    `Start` (W_j the transposed Cholesky factor of the precision, so W_j^T W_j = Σ_j^{-1}) and
    its mean log-likelihood."""
    gm = GaussianMixture(
        data.n_components,
        covariance_type="full",
        means_init=start.means.double().numpy(),
        max_iter=500,
        tol=1e-10,
        reg_covar=1e-6,
        random_state=0,
    )
    x = data.x.numpy()
    gm.fit(x)
    factors = torch.from_numpy(np.transpose(gm.precisions_cholesky_, (0, 2, 1)).copy())
    raw = torch.tril(factors, diagonal=-1) + torch.diag_embed(
        torch.log(torch.diagonal(factors, dim1=-2, dim2=-1))
    )
    fitted = Start(
        torch.from_numpy(gm.means_).float(),
        raw.float(),
        torch.from_numpy(np.log(gm.weights_)).float(),
    )
    return fitted, float(gm.score(x))


def alarmed(trained: dict[str, Any]) -> float:
    """1.0 when the tracer raised at least one alarm on this training, else 0.0."""
    return float(len(trained["alarms"]) > 0)


def reaches(trained: dict[str, Any], optimum: float, gap: float) -> float:
    """1.0 when the training ended finite and within `gap` nats per sample of EM's `optimum`."""
    final = trained["curves"]["gaussian_log_likelihood"][-1]
    return float(trained["diverged"] is None and final - optimum >= -gap)


def takeover(no_volume: dict[str, Any], volume: dict[str, Any]) -> float:
    """The largest mass share at the end (the last finite point) of `no_volume` minus that of
    `volume`, trained from the same start."""
    return mx.finite(lambda v: v[-1], no_volume["curves"]["max_share"]) - mx.finite(
        lambda v: v[-1], volume["curves"]["max_share"]
    )


def _start(config: dict[str, Any], seed: int, data: mx.Dataset) -> dict[str, Any]:
    """Every configuration from one seed's means on one data set, and EM's optimum from them."""
    start = random_rows(data, seed)
    measured: dict[str, Any] = {"reference": em_fit(data, start)[1]}
    for name in CONFIGURATIONS:
        measured[name] = train(name, data.x.float(), start, config)
    return measured


def _start_unit(config: dict[str, Any], seed: int, data: str) -> dict[str, Any]:
    """`_start` of one seed on the data set named `data`."""
    return _start(config, seed, mx.dataset(data, config["n_synthetic"], seed))


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per seed and data set: every configuration from that start."""
    return mx.start_units(config, _start_unit)


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
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
    for seed, data_name in mx.start_names(config["seeds"]):
        measured = results[f"{data_name}-seed{seed}"]
        reference = measured["reference"]
        healthy = measured["log-det volume"]
        unit_samples["no"].append(alarmed(measured["no volume"]))
        unit_samples["volume"].append(alarmed(healthy))
        unit_samples["reaches"].append(reaches(healthy, reference, config["em_gap"]))
        unit_samples["takeover"].append(takeover(measured["no volume"], healthy))
        unit_samples["diverged"].append(float(measured["surrogate"]["diverged"] is not None))
        for name in CONFIGURATIONS:
            curves, alarms, diverged = (measured[name][k] for k in ("curves", "alarms", "diverged"))
            per[name]["alarms"].append(len(alarms))
            per[name]["diverged"].append(diverged is not None)
            if seed == config["seeds"][0]:
                curves_first[(data_name, name)] = curves
            if diverged is not None:
                rows.append(
                    (
                        data_name,
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
                    data_name,
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
        "takeover_gain_max": float(np.max(unit_samples["takeover"])),
        "volume_diverged_share": float(np.mean(per["log-det volume"]["diverged"])),
        "seeds": len(config["seeds"]),
    }
    figure = volume_figure(curves_first, config, out)
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
        f"log-det volume {numbers['volume_alarm_share']:.0%}, surrogate {numbers['surrogate_alarm_share']:.0%}.",
        f"Largest mass share at the end, without the volume term minus with it from the same "
        f"start: {numbers['takeover_gain']:+.3f} on average (a component takes over when this "
        "is large and positive).",
    ]
    return Outcome(
        numbers=numbers,
        samples=per_data_set(
            {
                "no_volume_alarm_share": unit_samples["no"],
                "volume_alarm_share": unit_samples["volume"],
                "volume_reaches_em_share": unit_samples["reaches"],
                "surrogate_diverged_share": unit_samples["diverged"],
            },
            [d.name for _, d in mx.starts(config["seeds"], config["n_synthetic"])],
        ),
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


# -- known-answer controls ---------------------------------------------------------------------
#
# Every control trains through `train` from starts whose outcome is known: EM's own optimum
# (the log-det objective is the Gaussian likelihood, so it is stationary there; the objective
# without the volume term is lowered by shrinking every W_j, so it leaves it and collapses).


@cache
def _control_training(name: str, seed: int, index: int, key: str) -> tuple[dict[str, Any], float]:
    config = json.loads(key)
    data = mx.starts([seed], config["n_synthetic"])[index][1]
    fitted, optimum = em_fit(data, random_rows(data, seed))
    return train(name, data.x.float(), fitted, config), optimum


def _controlled(config: dict[str, Any], name: str) -> list[tuple[dict, float]]:
    """`train(name, ...)` from EM's own optimum on every (seed, data set) pair of the control
    configuration, with that optimum's mean log-likelihood; shared trainings are computed once."""
    key = json.dumps({k: v for k, v in config.items() if k != "device"}, sort_keys=True)
    pairs = range(len(mx.datasets(config["n_synthetic"])))
    return [_control_training(name, seed, i, key) for seed in config["seeds"] for i in pairs]


_SHRINKS = "no volume term from EM's own optimum (descent shrinks every W_j)"
_STAYS = "log-det volume from EM's own optimum (a stationary point of its objective)"


def _alarms(config: dict[str, Any], name: str) -> list[float]:
    return [alarmed(t) for t, _ in _controlled(config, name)]


def _reached(config: dict[str, Any], name: str) -> list[float]:
    return [reaches(t, opt, config["em_gap"]) for t, opt in _controlled(config, name)]


CONTROLS = {
    "no_volume_alarm_share": Controls(
        positive=Control(_SHRINKS, lambda c: _alarms(c, "no volume")),
        negative=Control(_STAYS, lambda c: _alarms(c, "log-det volume")),
    ),
    "volume_alarm_share": Controls(
        positive=Control(_STAYS, lambda c: _alarms(c, "log-det volume")),
        negative=Control(_SHRINKS, lambda c: _alarms(c, "no volume")),
    ),
    "volume_reaches_em_share": Controls(
        positive=Control(_STAYS, lambda c: _reached(c, "log-det volume")),
        negative=Control(_SHRINKS, lambda c: _reached(c, "no volume")),
    ),
}


EXPERIMENT = Experiment(
    id="E5",
    title="Volume: whitened components with and without log|det W|",
    claims=("C9", "C14d", "m1"),
    data_sets=mx.DATASETS,
    hypothesis=(
        "Without the log-det volume term, learnable whitening collapses (the scale of W "
        "shrinks, the true-model likelihood degrades) and the tracer's collapse alarms fire; "
        "with it, gradient descent reaches EM's optimum and the alarms stay silent."
    ),
    setup=(
        "K = 3 full-covariance components (means from random rows, W = I, uniform logits), "
        "full-batch Adam in float32 on the known 2-D mixture and on wine (PCA 2-D); the "
        "surrogate adds −Σ_j log Var(d_j) + ‖Corr(d) − I‖²_F. EM's optimum: GaussianMixture "
        "from the same means. The Tracer (default thresholds) runs on every configuration."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=(
        "no_volume_log_det_drop",
        "no_volume_alarm_share",
        "volume_alarm_share",
        "volume_reaches_em_share",
        "takeover_gain",
    ),
    meaning={
        "holds": (
            "The tracer tells collapsing runs from healthy ones from the gradients alone "
            "(C14d), and restoring log|det W| restores EM's optimum (C9); the gate shows that "
            "the LSE over distances is not a Gaussian likelihood without it (m1)."
        ),
        "partly": (
            "The collapse or its cure shows only in part; the criteria not met say whether the "
            "likelihood or the tracer's alarms disagree."
        ),
        "fails": "No collapse without the volume term and no recovery with it: C9 is not borne out here.",
    },
    minutes={"smoke": 0.1, "quick": 0.3, "full": 3.0},
    controls=CONTROLS,
)

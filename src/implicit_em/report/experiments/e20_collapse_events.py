r"""E20 (C14d): does the tracer detect the collapse that real training produces, and how early
against the monitors a practitioner watches today, a plain forward-softmax monitor among them?

Three families of runs, each trained with the tracer on (default thresholds, as a user runs it),
each with an arm prone to the event and a realistic arm that avoids it:

* `moe`: a top-$k$ mixture of experts on a clustered task, without the load-balancing loss
  (dead experts) and with it, and two arms whose dead experts an intervention plants (router
  biases forced down: never routed; output weights held at zero: routed, useless)
  (`_moe_events`);
* `attention`: a one-block transformer at a high and a low peak learning rate (attention
  collapse at the high one), and an arm whose collapse an intervention plants (query and key
  weights scaled up) (`_attention_events`);
* `sae`: a sparse autoencoder on an MLP's Fashion-MNIST activations at a high and a low L1
  penalty (dead latents at the high one) (`_sae_events`).

Every run's event and its onset are read afterwards from the run's held-out behaviour, never
from a quantity the tracer computes: an expert is dead when removing it from the router costs
the held-out loss less than a tolerance, the attention is dead when replacing its output by its
mean costs less than a tolerance (ablations), and an intervention defines its own event. Beside
the tracer, three practitioner monitors read the same runs: the forward-softmax monitor (each
expert's mean forward routing weight, each head's forward attention entropy, read by the
tracer's own rules: `_forward_monitors`), and a loss-spike and a gradient-norm spike detector
(`_event_training.first_spike`, rolling median + k · MAD; k set on development seeds). The
router's responsibilities read from its gradients equal its forward softmax to rounding (the
gate `router_residual_max`), so whatever the tracer catches that the forward monitor misses
comes from its other readings (dispatch counts, the classification head's logits), which the
per-alarm table names. The criteria read the tracer's detection share over the runs with an
event and its false-alarm share over the runs without one (exact Clopper–Pearson intervals);
every monitor's shares and leads are shown beside them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from implicit_em.report.experiments._attention_events import attention_run
from implicit_em.report.experiments._event_figure import event_figure
from implicit_em.report.experiments._event_readings import (
    DETECTORS,
    MONITORS,
    by_alarm,
    detections,
    false_alarms,
    fired,
    lead_before_onset,
    lead_over,
    share,
)
from implicit_em.report.experiments._experts import one_thread
from implicit_em.report.experiments._moe_events import moe_run
from implicit_em.report.experiments._sae_events import sae_run
from implicit_em.report.judging.controls import Control, Controls
from implicit_em.report.judging.stats import median_interval, share_interval
from implicit_em.report.running.plan import Unit
from implicit_em.report.running.registry import Experiment, Figure, Outcome, Table

RUNS: dict[str, Callable[[Mapping[str, Any], int, str], dict[str, Any]]] = {
    "moe": moe_run,
    "attention": attention_run,
    "sae": sae_run,
}
EVENTS = {
    "moe": "dead experts (top-k mixture of experts)",
    "attention": "dead attention (attention collapse)",
    "sae": "dead latents (sparse autoencoder)",
}
JUDGED = ("moe", "attention")
"""The families whose tracer readings the criteria judge; in a ReLU autoencoder the tracer finds
no site (it reads softmax responsibilities), so `sae` is shown only."""


def family_config(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """The configuration one run of `family` reads: its own block plus the shared monitor."""
    return {**config[family], "monitor": config["monitor"]}


def family_run(config: dict[str, Any], family: str, arm: str, seed: int) -> dict[str, Any]:
    """One run of `family` under `arm` from `seed` (a unit), on one CPU thread: the models are
    so small that more threads only add synchronization."""
    with one_thread():
        return RUNS[family](config, seed, arm)


def plan(config: dict[str, Any]) -> list[Unit]:
    """One unit per family, arm and seed."""
    return [
        Unit(
            f"{family}-{arm}-seed{seed}",
            family_run,
            {"config": family_config(config, family), "family": family, "arm": arm, "seed": seed},
        )
        for family in config["families"]
        for arm in config[family]["arms"]
        for seed in config["seeds"]
    ]


def _runs(config: Mapping[str, Any], results: Mapping[str, Any], family: str) -> list[Any]:
    return [
        results[f"{family}-{arm}-seed{seed}"]
        for arm in config[family]["arms"]
        for seed in config["seeds"]
    ]


def _share_cell(values: Sequence[float]) -> str:
    if not values:
        return "no runs"
    ci = share_interval(int(sum(values)), len(values), "clopper-pearson")
    return f"{int(sum(values))}/{len(values)} [{ci.low:.2f}, {ci.high:.2f}]"


def _median_cell(values: Sequence[float]) -> str:
    if not values:
        return "n/a"
    ci = median_interval(list(values))
    return f"{ci.estimate:+.0f} [{ci.low:+.0f}, {ci.high:+.0f}] (n={len(values)})"


def aggregate(config: dict[str, Any], results: Mapping[str, Any], out: Path) -> Outcome:
    numbers: dict[str, Any] = {"seeds": len(config["seeds"])}
    numbers.update({f"monitor_{k}": v for k, v in config["monitor"].items()})
    samples: dict[str, list[float]] = {}
    rows, lead_rows, alarm_rows = [], [], []
    by_family = {}
    for family in config["families"]:
        runs = _runs(config, results, family)
        by_family[family] = sorted(runs, key=lambda r: not r["event"])
        numbers[f"runs_{family}"] = len(runs)
        numbers[f"events_{family}"] = sum(r["event"] for r in runs)
        numbers[f"traced_share_{family}"] = share([float(r["traced"]) for r in runs])
        for arm in config[family]["arms"]:
            arm_runs = [results[f"{family}-{arm}-seed{s}"] for s in config["seeds"]]
            numbers[f"event_share_{family}_{arm}"] = share([float(r["event"]) for r in arm_runs])
            if "accuracy" in arm_runs[0]:
                numbers[f"accuracy_{family}_{arm}"] = min(r["accuracy"] for r in arm_runs)
        for detector, name in DETECTORS.items():
            hits, alarms = detections(runs, detector), false_alarms(runs, detector)
            numbers[f"detect_share_{family}_{detector}"] = share(hits)
            numbers[f"false_alarm_share_{family}_{detector}"] = share(alarms)
            rows.append((EVENTS[family], name, _share_cell(hits), _share_cell(alarms)))
            leads = lead_before_onset(runs, detector)
            numbers[f"lead_{family}_{detector}"] = (
                median_interval(leads).estimate if leads else math.nan
            )
            lead_rows.append((EVENTS[family], name, _median_cell(leads)))
        for monitor in MONITORS:
            gains = lead_over(runs, monitor)
            numbers[f"lead_over_{monitor}_{family}"] = (
                median_interval(gains).estimate if gains else math.nan
            )
            lead_rows.append(
                (EVENTS[family], f"tracer ahead of {DETECTORS[monitor]}", _median_cell(gains))
            )
        for alarm, alarm_runs in by_alarm(runs).items():
            leads = lead_before_onset(alarm_runs, "tracer")
            alarm_rows.append(
                (
                    EVENTS[family],
                    alarm,
                    _share_cell(detections(alarm_runs, "tracer")),
                    _share_cell(false_alarms(alarm_runs, "tracer")),
                    _median_cell(leads),
                )
            )
        first: dict[str, int] = {}  # which alarms came first on the runs with an event
        for r in (r for r in runs if r["event"]):
            for alarm in r["tracer_alarms"]:
                first[alarm] = first.get(alarm, 0) + 1
        numbers[f"first_alarms_{family}"] = ", ".join(f"{a} {c}" for a, c in sorted(first.items()))
        if family in SAME_RULE:
            numbers[f"same_step_as_forward_{family}"] = share(
                [
                    float(r["alarm_steps"].get(SAME_RULE[family]) == r["forward"])
                    for r in runs
                    if r["event"]
                ]
            )
        if family in FIRST_TRUTH:
            numbers[f"truth_agreement_{family}"] = share(
                [float(FIRST_TRUTH[family](r) == r["event"]) for r in runs]
            )
        if family in JUDGED:
            samples[f"detect_share_{family}"] = detections(runs, "tracer")
            samples[f"false_alarm_share_{family}"] = false_alarms(runs, "tracer")
    if "moe" in config["families"]:
        runs = _runs(config, results, "moe")
        numbers["router_residual_max"] = max(r["residuals"].get("router", math.inf) for r in runs)
        healthy = [results[f"moe-balanced-seed{s}"] for s in config["seeds"]]
        purity = [r["purity"] for r in healthy]
        numbers["purity_moe_balanced"] = sum(purity) / len(purity)
        numbers["specialised_share_moe_balanced"] = share([float(p >= 0.9) for p in purity])
    return Outcome(
        numbers=numbers,
        samples=samples,
        tables=[
            Table(
                "Per event type and detector: the runs with the event it caught and the runs "
                "without one where it fired (count, exact 95% Clopper–Pearson interval)",
                ("event", "detector", "detected", "false alarms"),
                tuple(rows),
            ),
            Table(
                "Leads in training steps (median, sign-test 95% interval): onset minus the "
                "detector's first step over the event runs it caught; and the monitor's first "
                "step minus the tracer's over all event runs (a detector that never fired read "
                "at the run's end)",
                ("event", "detector", "lead (steps)"),
                tuple(lead_rows),
            ),
            Table(
                "The tracer's alarms one by one, each read as a detector of its own: the event "
                "runs it fired on, the runs without an event it fired on (exact 95% "
                "Clopper–Pearson), and its lead on the onset over the event runs it caught "
                "(median, sign-test 95% interval)",
                ("event", "alarm", "detected", "false alarms", "lead (steps)"),
                tuple(alarm_rows),
            ),
        ],
        figures=[
            Figure(
                event_figure(by_family, EVENTS, out),
                "Each run (a row; runs with the event first): its ground-truth onset (black "
                "bar) and the first step at which each detector fired (none drawn: it never "
                "fired)",
            )
        ],
        notes=_notes(numbers, config),
    )


def _notes(n: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    out = []
    for family in config["families"]:
        out.append(
            f"{EVENTS[family]}: {n[f'events_{family}']} of {n[f'runs_{family}']} runs had the "
            f"event; the tracer found a site in {n[f'traced_share_{family}']:.0%} of the runs, "
            f"detected {n[f'detect_share_{family}_tracer']:.2f} of the events and fired on "
            f"{n[f'false_alarm_share_{family}_tracer']:.2f} of the runs without one (loss "
            f"spikes: {n[f'detect_share_{family}_loss_spike']:.2f} and "
            f"{n[f'false_alarm_share_{family}_loss_spike']:.2f}; gradient-norm spikes: "
            f"{n[f'detect_share_{family}_grad_spike']:.2f} and "
            f"{n[f'false_alarm_share_{family}_grad_spike']:.2f}); the tracer's first alarms on "
            f"the event runs: {n[f'first_alarms_{family}'] or 'none'}."
        )
    for family in (f for f in JUDGED if f in config["families"]):
        out.append(
            f"{EVENTS[family]}, the tracer against the forward-softmax monitor on the same runs: "
            f"detected {n[f'detect_share_{family}_tracer']:.2f} against "
            f"{n[f'detect_share_{family}_forward']:.2f}, false alarms "
            f"{n[f'false_alarm_share_{family}_tracer']:.2f} against "
            f"{n[f'false_alarm_share_{family}_forward']:.2f}, the tracer ahead by "
            f"{n[f'lead_over_forward_{family}']:+.0f} steps (median over the event runs); the "
            f"ablation ground truth agrees with the first version's (the tracer's own quantity) "
            f"on {n[f'truth_agreement_{family}']:.0%} of the runs."
            + (
                f" The tracer's {SAME_RULE[family]} alarm, the forward monitor's rule read "
                f"through the tracer, fired at the same step as the forward monitor on "
                f"{n[f'same_step_as_forward_{family}']:.0%} of the event runs."
                if family in SAME_RULE
                else ""
            )
        )
    if "router_residual_max" in n:
        out.append(
            f"Router: responsibilities read from its gradients against its forward softmax, "
            f"largest residual {n['router_residual_max']:.2g}: the gradient reading is the "
            f"forward reading, and adds nothing to it; with the balancing loss the experts "
            f"specialise (cluster purity ≥ 0.9) in {n['specialised_share_moe_balanced']:.0%} "
            f"of the runs (mean purity {n['purity_moe_balanced']:.3f})."
        )
    return out


@cache
def _control_run(key: str, family: str, arm: str, seed: int) -> dict[str, Any]:
    """One control run, computed once per process."""
    return family_run(family_config(json.loads(key), family), family, arm, seed)


def _fired(family: str, arm: str) -> Callable[[dict[str, Any]], list[float]]:
    """A control: per control seed, whether the tracer fired on the run of `family` under `arm`."""

    def measure(config: dict[str, Any]) -> list[float]:
        key = json.dumps(config, sort_keys=True)
        return fired([_control_run(key, family, arm, s) for s in config["seeds"]], "tracer")

    return measure


SAME_RULE = {"attention": "attention_entropy_collapse"}
"""Per family, the tracer alarm whose rule the forward-softmax monitor applies to the forward
weights: where the tracer's reading from the gradients adds nothing, both fire at the same step."""

FIRST_TRUTH: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "moe": lambda r: r["dead_by_load"] > 0,
    "attention": lambda r: bool(r["entropy_event"]),
}
"""Per judged family, the first version's ground truth (the quantity the tracer's own alarm
reads: held-out load share, held-out attention entropy), shown beside the ablations."""

CONTROL_ARMS = {"moe": ("none", "balanced"), "attention": ("high", "low")}
"""Per judged family: the arm prone to the event and its realistic rival without it."""
PLANTED = {
    "moe": "router biases of two experts set to −10 at the start (experts planted dead)",
    "attention": "query and key weights multiplied by 20 at the end of the warm-up (attention "
    "logits × 400: entropy collapse planted)",
}
REMOVED = {
    "moe": "the load-balancing loss (Switch, coefficient 1) keeps every expert in use",
    "attention": "the low peak learning rate keeps attention broad",
}


def _controls() -> dict[str, Controls]:
    out = {}
    for family, (stress, healthy) in CONTROL_ARMS.items():
        out[f"detect_share_{family}"] = Controls(
            positive=Control(PLANTED[family], _fired(family, "planted")),
            negative=Control(
                f"realistic: the same training with the collapse removed: {REMOVED[family]}; "
                "read: the tracer's alarm share",
                _fired(family, healthy),
            ),
        )
        out[f"false_alarm_share_{family}"] = Controls(
            positive=Control(f"runs where {REMOVED[family]}", _fired(family, healthy)),
            negative=Control(
                f"realistic: the runs prone to the event ({stress} arm), which collapse",
                _fired(family, stress),
            ),
        )
    return out


CONTROLS = _controls()

EXPERIMENT = Experiment(
    id="E20",
    title=(
        "Collapse that training produces: the tracer against forward-softmax, loss and "
        "gradient-norm monitors"
    ),
    claims=("C14d",),
    hypothesis=(
        "Reading only what it reads during training, with its default thresholds, the tracer "
        "raises an alarm on most runs whose experts or attention are dead by their held-out "
        "ablation (or by an intervention), and stays silent on most runs where they are not; "
        "shown beside it: whether its reading of responsibilities from gradients catches "
        "anything a forward-softmax monitor does not."
    ),
    setup=(
        "A top-1 mixture of 8 one-hidden-layer experts on an 8-cluster task, Adam, with and "
        "without the Switch load-balancing loss, or with two experts' router biases forced to "
        "−10 or their output weights held at 0; an expert is dead when removing it from the "
        "router raises the held-out cross-entropy by less than 0.002 nats. A one-block "
        "transformer (2 heads, no QK-norm) on the majority token of 16, Adam with a linear "
        "warm-up to a high or a low peak rate, or the low rate with query and key weights "
        "scaled by 20 after the warm-up; its attention is dead when replacing the attention "
        "output by its held-out mean raises the held-out cross-entropy by less than 0.2 nats. "
        "a ReLU sparse autoencoder (256 latents) on the 64 hidden activations of an MLP trained "
        "on a Fashion-MNIST subset, at a high or a low L1 penalty. The tracer with its default "
        "thresholds every 5 steps; the forward-softmax monitor (mean forward routing weight per "
        "expert over 16 measured steps below 0.01/E; a head's forward attention entropy below "
        "0.1 × its first value); the loss and gradient-norm spike monitors (rolling median "
        "over 20 steps + k · MAD)."
    ),
    plan=plan,
    aggregate=aggregate,
    headline=(
        "detect_share_moe_tracer",
        "detect_share_moe_forward",
        "detect_share_attention_tracer",
    ),
    meaning={
        "holds": (
            "The tracer caught most dead-expert and dead-attention events and stayed silent "
            "on most runs without them: it tracks collapse that real training produces."
        ),
        "partly": (
            "The tracer caught one kind of event, or caught events but also fired on healthy "
            "runs; the criteria not met say which."
        ),
        "fails": "The tracer missed the events real training produced, or fired on healthy runs.",
    },
    minutes={"smoke": 0.4, "quick": 0.8, "full": 3.0},
    controls=CONTROLS,
)

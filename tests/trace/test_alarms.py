"""The alarm rules know their site's regime: a classification head against its labels, a
router against its fair share over a window, and every message names the likely cause, the
usual remedy and the source of its threshold."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from implicit_em.trace import CollapseWarning, Thresholds, Tracer
from implicit_em.trace.alarms import DEFAULT_THRESHOLDS, Alarms

W = DEFAULT_THRESHOLDS.window


def _head_alarms(labels: torch.Tensor, steps: int, thresholds: Thresholds = DEFAULT_THRESHOLDS):
    """Alarms of a classification head over `steps` measured steps whose logits give class 4
    no mass (logit -30), with these labels."""
    torch.manual_seed(0)
    z = torch.randn(labels.shape[0], 5)
    z[:, 4] = -30.0
    with warnings.catch_warnings(), Tracer(thresholds=thresholds) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        for _ in range(steps):
            F.cross_entropy(z.clone().requires_grad_(), labels).backward()
            tracer.step()
    return tracer.alarms


def test_a_class_absent_from_the_labels_is_not_dead():
    labels = torch.arange(64) % 4  # class 4 never occurs
    assert _head_alarms(labels, W + 4) == []


def test_a_class_among_the_labels_without_responsibility_is_dead_over_the_window():
    labels = torch.arange(64) % 5  # class 4 labels 12 rows a step, yet gets no mass
    alarms = _head_alarms(labels, W + 2)
    dead = [a for a in alarms if a["alarm"] == "dead_components"]
    assert [a["step"] for a in dead] == [W - 1, W, W + 1]  # once the window is full
    assert dead[0]["value"] == 1.0 and "classes [4]" in dead[0]["message"]
    assert "Likely cause" in dead[0]["message"] and "output layer" in dead[0]["message"]


def test_a_class_labelling_too_few_rows_of_the_window_is_not_judged():
    labels = torch.arange(64) % 4
    labels[0] = 4  # one row a step: W rows in the window
    assert _head_alarms(labels, W + 2, Thresholds(dead_label_rows=W + 1)) == []
    fired = _head_alarms(labels, W + 2, Thresholds(dead_label_rows=W))
    assert {a["alarm"] for a in fired} == {"dead_components"}


def _router_record(step: int, load: list[float]) -> dict:
    return {
        "kind": "site",
        "step": step,
        "site": "gate.router",
        "type": "router",
        "exact": True,
        "expert_load": load,
        "log_z": 1.0,
    }


def _replay(records: list[dict], thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[dict]:
    rules = Alarms(thresholds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollapseWarning)
        return [a for r in records for a in rules(r)]


def test_an_expert_empty_in_one_step_is_not_dead():
    balanced, empty = [0.25] * 4, [1 / 3, 1 / 3, 1 / 3, 0.0]
    loads = [balanced] * 5 + [empty] + [balanced] * W
    assert _replay([_router_record(s, f) for s, f in enumerate(loads)]) == []


def test_an_expert_with_almost_no_tokens_over_the_window_is_dead():
    dead = [0.333, 0.333, 0.333, 0.001]  # 0.004 of its fair share 1/4
    records = [_router_record(s, dead) for s in range(W + 1)]
    alarms = _replay(records)
    assert [(a["step"], a["alarm"]) for a in alarms] == [
        (W - 1, "dead_experts"),
        (W, "dead_experts"),
    ]
    assert alarms[0]["value"] == 1.0
    assert _replay(records, Thresholds(expert_share=0.001)) == []


def test_a_starved_expert_that_still_gets_tokens_is_not_dead():
    starved = [0.33, 0.33, 0.33, 0.01]  # 0.04 of its fair share: starved, not dead
    records = [_router_record(s, starved) for s in range(W + 1)]
    assert _replay(records) == []
    assert {a["alarm"] for a in _replay(records, Thresholds(expert_share=0.1))} == {"dead_experts"}


def _attention_record(step: int, sink: float) -> dict:
    return {
        "kind": "site",
        "step": step,
        "site": "attn",
        "type": "attention",
        "exact": True,
        "head_entropy": [2.0],
        "max_logit": [3.0],
        "sink_share": [sink],
    }


def test_an_attention_sink_is_no_alarm_unless_asked_for():
    records = [_attention_record(0, 0.2), _attention_record(1, 0.9)]
    assert _replay(records) == []
    fired = _replay(records, Thresholds(sink_share=0.6))
    assert [(a["step"], a["alarm"]) for a in fired] == [(1, "attention_sink")]


def test_overload_reads_the_window_mean():
    spike, even = [0.7, 0.1, 0.1, 0.1], [0.25] * 4
    loads = [spike] + [even] * (W - 1)  # one overloaded step in the window
    assert _replay([_router_record(s, f) for s, f in enumerate(loads)]) == []
    alarms = _replay([_router_record(s, spike) for s in range(W)])
    assert [a["alarm"] for a in alarms] == ["expert_overload"]
    assert alarms[0]["value"] == pytest.approx(2.8)


@pytest.mark.parametrize(
    ("record", "alarm", "words"),
    [
        (
            {"type": "attention", "head_entropy": [1.0], "max_logit": [500.0]},
            "attention_logit_growth",
            ["QK-norm", "QK-Clip", "warm-up", "Kimi K2"],
        ),
        (
            {"type": "router", "expert_load": [1.0, 0.0], "log_z": 0.0},
            "dead_experts",
            ["balancing loss", "coefficient", "Switch"],
        ),
        ({"type": "classification", "nonfinite": 3.0}, "nonfinite_gradient", ["loss scaling"]),
    ],
)
def test_messages_name_the_cause_the_remedy_and_the_source(record, alarm, words):
    base = {"kind": "site", "step": 0, "site": "s", "exact": True, "K": 0, "rows": 0}
    rules = Alarms(Thresholds(window=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollapseWarning)
        fired = {a["alarm"]: a for a in rules(base | record)}
    message = fired[alarm]["message"]
    assert "Likely cause: " in message and "Usual remedy: " in message
    assert all(w in message for w in words), message

"""Logit-scale metrics (per-head largest scaled score, attention to position 0, log Z of
classification heads) against direct computation, and the alarm rules that read them."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import CollapseWarning, Thresholds, Tracer
from implicit_em.trace.alarms import DEFAULT_THRESHOLDS

from .conftest import site_records, small_gpt2


class _Attend(nn.Module):
    """Causal SDPA or eager attention over given queries, keys and values `[B, H, L, E]`,
    with the scores multiplied by `gain`."""

    def __init__(self, eager: bool) -> None:
        super().__init__()
        self.eager = eager

    def forward(self, q, k, v, gain: float = 1.0) -> torch.Tensor:
        if not self.eager:
            return F.scaled_dot_product_attention(q * gain, k, v, is_causal=True)
        s = (q * gain) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -torch.inf)
        return torch.softmax(s, -1) @ v


def _expected(q, k, gain):
    s = (q[:1] * gain) @ k[:1].transpose(-2, -1) / math.sqrt(q.shape[-1])
    causal = torch.ones(s.shape[-2:], dtype=torch.bool).triu(1)
    alpha = torch.softmax(s.masked_fill(causal, -torch.inf), -1)
    max_logit = s.masked_fill(causal, -torch.inf).amax((0, 2, 3))
    return max_logit, alpha[..., 0].mean((0, 2))


@pytest.mark.parametrize("eager", [False, True])
def test_max_logit_and_sink_share_per_head(eager):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 10, 8, requires_grad=True) for _ in range(3))
    model = _Attend(eager)
    with Tracer(model) as tracer:
        model(q, k, v, gain=4.0).sum().backward()
        tracer.step()
    (r,) = site_records(tracer)
    max_logit, sink = _expected(q.detach(), k.detach(), 4.0)
    assert r["max_logit"] == pytest.approx(max_logit.tolist(), abs=1e-5)
    assert r["sink_share"] == pytest.approx(sink.tolist(), abs=1e-6)
    assert r["exact"] is True


def test_eager_and_sdpa_gpt2_agree_on_the_logit_scale():
    records = {}
    for impl in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = small_gpt2(impl)
        ids = torch.randint(0, 40, (2, 12))
        with Tracer(model) as tracer:
            model(input_ids=ids, labels=ids).loss.backward()
            tracer.step()
        records[impl] = {r["site"]: r for r in site_records(tracer)}
    for site, a in records["eager"].items():
        b = records["sdpa"][site]
        for key in ("max_logit", "sink_share", "log_z", "log_z_max"):
            assert (a[key] is None) == (b[key] is None) if key in a else True
            if a.get(key) is not None:
                assert b[key] == pytest.approx(a[key], abs=1e-5)


def test_log_z_of_a_classification_head():
    torch.manual_seed(0)
    z = (3 * torch.randn(30, 6)).requires_grad_()
    y = torch.randint(0, 6, (30,))
    y[:4] = -100  # ignored rows are left out
    with Tracer() as tracer:
        F.cross_entropy(z, y).backward()
        tracer.step()
    (r,) = site_records(tracer)
    lse = torch.logsumexp(z.detach()[4:], -1)
    assert r["log_z"] == pytest.approx(float(lse.mean()), abs=1e-5)
    assert r["log_z_max"] == pytest.approx(float(lse.max()), abs=1e-5)


def _alarms(model, steps, tracer_kwargs=None):
    with warnings.catch_warnings(), Tracer(model, **(tracer_kwargs or {})) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        for run in steps:
            run()
            tracer.step()
    return tracer.alarms


def test_attention_alarms_logit_growth_entropy_collapse_and_sink():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 8, requires_grad=True) for _ in range(3))
    model = _Attend(eager=False)
    gains = [1.0, 1.0, 60.0]
    alarms = _alarms(model, [lambda g=g: model(q, k, v, gain=g).sum().backward() for g in gains])
    fired = {(a["step"], a["alarm"]) for a in alarms}
    assert (2, "attention_logit_growth") in fired
    assert (2, "attention_entropy_collapse") in fired
    assert not any(step < 2 for step, _ in fired)
    growth = next(a for a in alarms if a["alarm"] == "attention_logit_growth")
    assert "QK-Clip" in growth["message"] and "qk-layernorm" in growth["message"]
    collapse = next(a for a in alarms if a["alarm"] == "attention_entropy_collapse")
    assert "first" in collapse["message"] and "σReparam" in collapse["message"]

    q_sink = (q.detach() + 2.0).requires_grad_()  # every query shares a direction ...
    k_sink = k.detach().clone()
    k_sink[..., 0, :] = 1.0  # ... with key 0, so every query attends to position 0
    k_sink.requires_grad_()
    alarms = _alarms(
        model,
        [
            lambda: model(q, k, v).sum().backward(),
            lambda: model(q_sink, k_sink, v).sum().backward(),
        ],
        {"thresholds": Thresholds(sink_share=0.6)},
    )
    assert [a["alarm"] for a in alarms] == ["attention_sink"]


def test_log_z_drift_fires_on_a_shift_not_on_growing_correct_logits():
    """Growing correct logits raise log Z while the loss falls: no alarm. A shift of every
    logit (the softmax cannot see it) down lowers the target logit, and up raises log Z with
    no gain in the loss: an alarm once it is more than `head_log_z_drift` nats from its first
    value."""
    torch.manual_seed(0)
    drift = DEFAULT_THRESHOLDS.head_log_z_drift
    z = torch.randn(16, 5)
    y = torch.randint(0, 5, (16,))
    onehot = F.one_hot(y, 5).float()

    def step(logits):
        logits = logits.clone().requires_grad_()
        return lambda: F.cross_entropy(logits, y).backward()

    growing = [z + 2.0 * drift * s * onehot for s in range(6)]
    assert _alarms(None, [step(g) for g in growing]) == []
    sliding = [z - 0.6 * drift * s for s in range(3)]
    alarms = _alarms(None, [step(g) for g in sliding])
    assert [(a["step"], a["alarm"]) for a in alarms] == [(2, "log_z_drift")]
    (alarm,) = alarms
    first = float(z.gather(1, y[:, None]).mean())
    assert alarm["value"] == pytest.approx(first - 1.2 * drift, abs=1e-5)
    assert alarm["threshold"] == pytest.approx(first - drift, abs=1e-5)
    assert "z-loss" in alarm["message"] and "Wortsman" in alarm["message"]
    strict = {"thresholds": Thresholds(head_log_z_drift=2 * drift)}
    assert _alarms(None, [step(g) for g in sliding], strict) == []
    rising = _alarms(None, [step(z + 0.6 * drift * s) for s in range(3)])
    assert [(a["step"], a["alarm"]) for a in rising] == [(2, "log_z_drift")]
    assert "no gain in the loss" in rising[0]["message"]

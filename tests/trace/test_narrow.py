"""Narrow capture: after one discovery, measured steps follow the plan with the same results."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import Tracer

from .conftest import assert_same_parameters, train


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(16 * 6, 3))


XS, YS = torch.randn(8, 6, 16), torch.randint(0, 3, (8,))


def _step(m: nn.Module) -> torch.Tensor:
    return F.cross_entropy(m(XS), YS)


def _sites(tracer: Tracer) -> list[dict]:
    return [r for r in tracer.history if r["kind"] == "site"]


def _assert_same_metric(key: str, a: float, b: float) -> None:
    """Equal to float round-off; the residuals are themselves round-off (~1e-7), which a
    different order of summation changes by its own size."""
    if key.endswith("residual"):
        assert abs(a - b) <= 1e-6, key
    else:
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


def test_narrow_passes_equal_a_discovery_on_every_step():
    narrow_model, narrow = train(_encoder, _step, 5, {"every": 1})
    full_model, full = train(_encoder, _step, 5, {"every": 1, "rediscover": 1})
    assert_same_parameters(narrow_model, full_model)
    assert narrow.discoveries == 2 and full.discoveries == 5
    a, b = _sites(narrow), _sites(full)
    assert [(r["step"], r["site"]) for r in a] == [(r["step"], r["site"]) for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for key, value in ra.items():
            if isinstance(value, float):
                _assert_same_metric(key, value, rb[key])
            else:
                assert value == rb[key], key


def test_narrow_pass_names_sites_outside_the_model_by_their_producer():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    with Tracer(model) as tracer:
        for _ in range(3):
            F.cross_entropy(model(x).view(16, 3), y).backward()
            tracer.step()
    assert [r["site"] for r in _sites(tracer)] == ["2.ce"] * 3
    assert tracer.discoveries == 2


class _Growing(nn.Module):
    """A classifier that adds an attention layer to its forward pass from a given step on."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)
        self.use_attention = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_attention:
            x = self.attn(x, x, x, need_weights=False)[0]
        return self.head(x.mean(1))


def test_a_site_in_a_new_module_is_picked_up_by_the_periodic_rediscovery():
    torch.manual_seed(0)
    model = _Growing()
    x, y = torch.randn(4, 5, 8), torch.randint(0, 3, (4,))
    with Tracer(model, rediscover=3) as tracer:
        for step in range(7):
            model.use_attention = step >= 3
            F.cross_entropy(model(x), y).backward()
            tracer.step()
    # Steps 0 and 1 discover and agree; steps 2 and 3 follow their plan, which has no scope
    # inside `attn`; steps 4 and 5 rediscover, step 6 follows the new plan.
    sites = [(r["step"], r["site"]) for r in _sites(tracer)]
    assert sites == [(s, "head.ce") for s in range(4)] + [
        (s, name) for s in (4, 5, 6) for name in ("attn", "head.ce")
    ]
    assert tracer.discoveries == 4


def test_an_unplanned_site_inside_a_planned_scope_triggers_rediscovery():
    model = nn.Linear(4, 3)
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with Tracer(model) as tracer:
        for step in range(5):
            z = model(x)
            loss = F.cross_entropy(z, y)
            if step >= 2:
                loss = loss + F.cross_entropy(2 * z, y)
            loss.backward()
            tracer.step()
    # Step 2 follows the plan of steps 0 and 1: its second loss is unplanned (left out), and
    # steps 3 and 4 rediscover it.
    assert [(r["step"], r["site"]) for r in _sites(tracer)] == [
        (0, "ce"),
        (1, "ce"),
        (2, "ce"),
        (3, "ce"),
        (3, "ce#2"),
        (4, "ce"),
        (4, "ce#2"),
    ]
    assert tracer.discoveries == 4


def test_a_site_vanishing_triggers_rediscovery():
    torch.manual_seed(0)
    model = _Growing()
    model.use_attention = True
    x, y = torch.randn(4, 5, 8), torch.randint(0, 3, (4,))
    with Tracer(model) as tracer:
        for step in range(4):
            model.use_attention = step < 2
            F.cross_entropy(model(x), y).backward()
            tracer.step()
    assert [(r["step"], r["site"]) for r in _sites(tracer)] == [
        (0, "attn"),
        (0, "head.ce"),
        (1, "attn"),
        (1, "head.ce"),
        (2, "head.ce"),
        (3, "head.ce"),
    ]
    assert tracer.discoveries == 3


def test_a_loss_before_the_model_keeps_full_discovery():
    model = nn.Linear(4, 3)
    z = torch.randn(6, 3, requires_grad=True)
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with Tracer(model) as tracer:
        for _ in range(3):
            (F.cross_entropy(z, y) + F.cross_entropy(model(x), y)).backward()
            tracer.step()
    assert [r["site"] for r in _sites(tracer)] == ["ce", "ce#2"] * 3
    assert tracer.discoveries == 3


class _Attend(nn.Module):
    """A classifier over one ``nn.MultiheadAttention`` call, in a given layout, with
    self- or cross-attention and a given kind of mask."""

    def __init__(self, batch_first: bool, cross: bool, mask: str) -> None:
        super().__init__()
        extra = {"kdim": 5, "vdim": 7} if cross else {}
        self.attn = nn.MultiheadAttention(8, 2, batch_first=batch_first, **extra)
        self.head = nn.Linear(8, 3)
        self.batch_first, self.cross, self.mask = batch_first, cross, mask

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not self.cross:
            k = v = x
        n, lq, lk = x.shape[0], x.shape[1], k.shape[1]
        if not self.batch_first:
            x, k, v = (t.transpose(0, 1) for t in (x, k, v))
            if not self.cross:
                k = v = x
        masks = {}
        if self.mask == "padding":
            padding = torch.zeros(n, lk, dtype=torch.bool)
            padding[::2, -2:] = True
            masks["key_padding_mask"] = padding
        elif self.mask == "causal":
            masks["attn_mask"] = torch.ones(lq, lk, dtype=torch.bool).triu(1)
        elif self.mask == "per-head":
            masks["attn_mask"] = torch.randn(n * 2, lq, lk) * 0.5
        out, _ = self.attn(x, k, v, need_weights=False, **masks)
        return self.head(out.mean(1 if self.batch_first else 0))


@pytest.mark.parametrize(
    ("batch_first", "cross", "mask"),
    [
        (True, False, "none"),
        (False, False, "padding"),
        (True, False, "causal"),
        (False, True, "per-head"),
        (True, True, "padding"),
    ],
)
def test_multihead_attention_captured_by_its_module_equals_a_discovery(batch_first, cross, mask):
    """A narrow pass captures a stock nn.MultiheadAttention from its module's inputs and output,
    without the mode: the records equal those of a discovery on every step."""
    torch.manual_seed(3)
    x, k, v = torch.randn(4, 6, 8), torch.randn(4, 5, 5), torch.randn(4, 5, 7)
    y = torch.randint(0, 3, (4,))
    runs = []
    for rediscover in (100, 1):
        torch.manual_seed(4)
        model = _Attend(batch_first, cross, mask)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Tracer(model, every=1, rediscover=rediscover, max_rows=2) as tracer:
            for _ in range(5):
                torch.manual_seed(5)
                F.cross_entropy(model(x, k, v), y).backward()
                opt.step()
                opt.zero_grad()
                tracer.step()
        runs.append((model, tracer))
    (narrow_model, narrow), (full_model, full) = runs
    assert narrow._plan is not None and narrow._plan.modules == {"attn"}
    assert_same_parameters(narrow_model, full_model)
    a, b = _sites(narrow), _sites(full)
    assert [(r["step"], r["site"]) for r in a] == [(r["step"], r["site"]) for r in b]
    assert all(r["alpha_residual"] <= 1e-5 for r in a if r["type"] == "attention")
    for ra, rb in zip(a, b, strict=True):
        for key, value in ra.items():
            if isinstance(value, float):
                _assert_same_metric(key, value, rb[key])
            else:
                assert value == rb[key], key


class _InPlace(nn.Module):
    """Self-attention whose output (or input) is changed in place after the module returns."""

    def __init__(self, changed: str) -> None:
        super().__init__()
        self.changed = changed
        self.embed = nn.Linear(5, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        out, _ = self.attn(h, h, h, need_weights=False)
        if self.changed == "output":
            out.mul_(2.0)
        else:
            h.add_(1.0)
        return self.head(out.mean(1))


@pytest.mark.parametrize("changed", ["output", "input"])
def test_multihead_attention_changed_in_place_after_the_module_is_captured_at_once(changed):
    """A narrow pass captures module sites when the model's forward ends; a site whose output
    was changed in place since keeps no output on that step (no forward residual), one whose
    input was changed is left out of that step, and later steps capture at the module."""
    torch.manual_seed(0)
    x, y = torch.randn(4, 6, 5), torch.randint(0, 3, (4,))
    runs = []
    for rediscover in (100, 1):
        torch.manual_seed(1)
        model = _InPlace(changed)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Tracer(model, every=1, rediscover=rediscover) as tracer:
            for _ in range(5):
                if changed == "output":
                    F.cross_entropy(model(x), y).backward()
                    opt.step()
                    opt.zero_grad()
                else:
                    with torch.no_grad():
                        model(x)
                tracer.step()
        runs.append(_sites(tracer))
    deferred, immediate = ([r for r in run if r["site"] == "attn"] for run in runs)
    assert [r["step"] for r in immediate] == [0, 1, 2, 3, 4]
    steps = [0, 1, 2, 3, 4] if changed == "output" else [0, 1, 3, 4]
    assert [r["step"] for r in deferred] == steps
    kept = [r for r in immediate if r["step"] in steps]
    for rd, ri in zip(deferred, kept, strict=True):
        assert rd["entropy"] == pytest.approx(ri["entropy"], rel=1e-6)
        if rd["step"] == 2:
            assert rd["alpha_residual"] is None
        else:
            assert rd["alpha_residual"] <= 1e-5


class _After(nn.Module):
    """A model whose attention module the training step calls after the model's forward."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(5, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x)


def test_multihead_attention_called_after_the_model_is_captured_at_once():
    """A module site outside the model's forward pass is captured at its module (not when the
    model's forward ends, which came before it): its gradient is read as in a discovery."""
    torch.manual_seed(0)
    x, y = torch.randn(4, 6, 5), torch.randint(0, 3, (4,))
    runs = []
    for rediscover in (100, 1):
        torch.manual_seed(1)
        model = _After()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Tracer(model, every=1, rediscover=rediscover) as tracer:
            for _ in range(4):
                h = model(x)
                a, _ = model.attn(h, h, h, need_weights=False)
                F.cross_entropy(model.head(a.mean(1)), y).backward()
                opt.step()
                opt.zero_grad()
                tracer.step()
        runs.append([r for r in _sites(tracer) if r["site"] == "attn"])
    narrow, full = runs
    assert [r["step"] for r in narrow] == [0, 1, 2, 3]
    for rn, rf in zip(narrow, full, strict=True):
        for key in ("entropy", "routing_norm", "value_norm"):
            _assert_same_metric(key, rn[key], rf[key])

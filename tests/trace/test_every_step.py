"""Every site present in a measured step is measured in that step (or recorded as unmeasured,
with the reason): sites that appear, vanish or repeat, and the forms of nn.MultiheadAttention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import Tracer


def _sites(tracer: Tracer) -> list[tuple[int, str]]:
    return [(r["step"], r["site"]) for r in tracer.history if r["kind"] == "site"]


class _TwoAttentions(nn.Module):
    """Two attention layers; the second joins the forward pass from step ``late`` on."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.MultiheadAttention(8, 2, batch_first=True)
        self.second = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)
        self.use_second = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x, x, x, need_weights=False)[0]
        if self.use_second:
            x = self.second(x, x, x, need_weights=False)[0]
        return self.head(x.mean(1))


def test_a_site_that_appears_later_is_measured_from_its_first_step():
    torch.manual_seed(0)
    model = _TwoAttentions()
    x, y = torch.randn(4, 5, 8), torch.randint(0, 3, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model, every=1) as tracer:
        for step in range(6):
            model.use_second = step >= 3
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    second = [s for s, name in _sites(tracer) if name == "second"]
    assert second == [3, 4, 5]
    assert [s for s, name in _sites(tracer) if name == "first"] == list(range(6))
    records = [r for r in tracer.history if r["kind"] == "site" and r["type"] == "attention"]
    assert all(r["alpha_residual"] <= 1e-5 and r["missing"] == [] for r in records)


def test_a_site_that_vanishes_is_no_longer_recorded():
    torch.manual_seed(0)
    model = _TwoAttentions()
    x, y = torch.randn(4, 5, 8), torch.randint(0, 3, (4,))
    with Tracer(model) as tracer:
        for step in range(4):
            model.use_second = step < 2
            F.cross_entropy(model(x), y).backward()
            tracer.step()
    assert [s for s, name in _sites(tracer) if name == "second"] == [0, 1]


def test_a_second_loss_is_measured_from_its_first_step():
    model = nn.Linear(4, 3)
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with Tracer(model) as tracer:
        for step in range(4):
            z = model(x)
            loss = F.cross_entropy(z, y)
            if step >= 2:
                loss = loss + F.cross_entropy(2 * z, y)
            loss.backward()
            tracer.step()
    assert _sites(tracer) == [(0, "ce"), (1, "ce"), (2, "ce"), (2, "ce#2"), (3, "ce"), (3, "ce#2")]
    # Both losses share z: each site reads its own loss's gradient, so no artefact alarms.
    records = [r for r in tracer.history if r["kind"] == "site"]
    assert all(r["exact"] and r["residual"] <= 1e-5 and r["dominance"] <= 1 for r in records)
    assert tracer.alarms == []


def test_sites_are_named_by_the_module_that_produced_their_input():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    z = torch.randn(16, 3, requires_grad=True)
    with Tracer(model) as tracer:
        for _ in range(3):
            (F.cross_entropy(z, y) + F.cross_entropy(model(x).view(16, 3), y)).backward()
            tracer.step()
    assert [name for _, name in _sites(tracer)] == ["ce", "2.ce"] * 3


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
def test_multihead_attention_forms_rebuild_their_output(batch_first, cross, mask):
    """Layouts, cross-attention with its own key and value dims, and every kind of mask: the
    recomputed weights rebuild the module's output on every step (forward residual), and the
    training is unchanged."""
    x, k, v = torch.randn(4, 6, 8), torch.randn(4, 5, 5), torch.randn(4, 5, 7)
    y = torch.randint(0, 3, (4,))
    params = []
    for traced in (False, True):
        torch.manual_seed(4)
        model = _Attend(batch_first, cross, mask)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Tracer(model, every=1, max_rows=2) as tracer:
            for _ in range(4):
                torch.manual_seed(5)
                if traced:
                    F.cross_entropy(model(x, k, v), y).backward()
                else:
                    with tracer.paused():
                        F.cross_entropy(model(x, k, v), y).backward()
                opt.step()
                opt.zero_grad()
                if traced:
                    tracer.step()
        params.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*params, strict=True):
        assert torch.equal(a, b)
    attention = [r for r in tracer.history if r["site"] == "attn"]
    assert [r["step"] for r in attention] == [0, 1, 2, 3]
    assert all(r["alpha_residual"] <= 1e-5 and r["routing_norm"] > 0 for r in attention)


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
def test_multihead_attention_changed_in_place_after_the_module(changed):
    """What the site keeps is taken when the module runs: a later in-place change of its
    input or output changes no measurement."""
    torch.manual_seed(1)
    model = _InPlace(changed)
    x = torch.randn(4, 6, 5)
    with Tracer(model, every=1) as tracer:
        for _ in range(3):
            with torch.no_grad():
                model(x)
            tracer.step()
    records = [r for r in tracer.history if r["site"] == "attn"]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(r["alpha_residual"] <= 1e-5 for r in records)


def test_multihead_attention_called_after_the_model_is_measured():
    torch.manual_seed(0)
    embed, attn, head = (
        nn.Linear(5, 8),
        nn.MultiheadAttention(8, 2, batch_first=True),
        nn.Linear(8, 3),
    )
    model = nn.ModuleDict({"embed": embed, "attn": attn, "head": head})
    x, y = torch.randn(4, 6, 5), torch.randint(0, 3, (4,))
    with Tracer(model, every=1) as tracer:
        for _ in range(3):
            h = embed(x)
            a, _ = attn(h, h, h, need_weights=False)
            F.cross_entropy(head(a.mean(1)), y).backward()
            tracer.step()
    assert _sites(tracer) == [(s, n) for s in range(3) for n in ("attn", "head.ce")]
    assert all(r["routing_norm"] > 0 for r in tracer.history if r["site"] == "attn")


def test_an_unsupported_form_is_recorded_as_unmeasured_with_the_reason():
    torch.manual_seed(0)
    model = nn.MultiheadAttention(8, 2, add_zero_attn=True, batch_first=True)
    x = torch.randn(3, 4, 8)
    with Tracer(model) as tracer:
        model(x, x, x)[0].sum().backward()
        tracer.step()
    (r,) = tracer.history
    assert r["site"] == "attention" and r["reason"] == "bias_k / add_zero_attn"
    assert r["entropy"] is None and "entropy" in r["missing"]

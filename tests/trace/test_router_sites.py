"""Mixture-of-experts routers: a softmax over the experts of token rows, with or without a
following top-k (hand-written Switch and Mixtral-style layers, Hugging Face MoE models built
from their configs), measured against what the model itself routed."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import CollapseWarning, Tracer
from implicit_em.trace.alarms import DEFAULT_THRESHOLDS

from .conftest import site_records


class _MoE(nn.Module):
    """Tokens `[T, D]` through a linear gate and `experts` linear experts: softmax, then top-k
    (`k` > 1, renormalized as in Mixtral) or the top-1 maximum (Switch); it returns the
    class logits and the router z-loss of the same gate logits (ST-MoE)."""

    def __init__(self, k: int, experts: int = 4, width: int = 16) -> None:
        super().__init__()
        self.gate = nn.Linear(width, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(width, width) for _ in range(experts))
        self.head = nn.Linear(width, 5)
        self.k = k
        self.routed: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.gate(x)
        p = F.softmax(logits, dim=-1)
        if self.k == 1:
            w, index = p.max(dim=-1, keepdim=True)
        else:
            w, index = torch.topk(p, self.k, dim=-1)
            w = w / w.sum(-1, keepdim=True)
        self.routed.append(index.detach())
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            out = out + (w * (index == i)).sum(-1, keepdim=True) * expert(x)
        return self.head(out), torch.logsumexp(logits, -1).square().mean()


@pytest.mark.parametrize("k", [1, 2])
def test_a_hand_written_moe_router_against_what_it_routed(k):
    torch.manual_seed(0)
    model = _MoE(k)
    x, y = torch.randn(96, 16), torch.randint(0, 5, (96,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model) as tracer:
        for _ in range(3):
            z, z_loss = model(x)
            (F.cross_entropy(z, y) + 1e-2 * z_loss).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    routers = [r for r in site_records(tracer) if r["type"] == "router"]
    assert [r["site"] for r in routers] == ["gate.router"] * 3
    for r, index in zip(routers, model.routed, strict=True):
        load = torch.bincount(index.reshape(-1), minlength=4).double() / index.numel()
        assert r["top_k"] == k and r["K"] == 4
        assert r["expert_load"] == pytest.approx(load.tolist())
        assert r["exact"] is True and r["residual"] <= 1e-5
        f, p = torch.tensor(r["expert_load"]), torch.tensor(r["expert_prob"])
        assert r["aux_balance"] == pytest.approx(4 * float((f * p).sum()))
        assert r["max_load_ratio"] == pytest.approx(4 * max(r["expert_load"]))
        assert r["load_cv"] == pytest.approx(float(f.std(correction=0) / f.mean()))
        assert r["dead_experts"] == float((load == 0).sum())
        assert r["expert_prob"] == r["mass"]
        assert 1 / 4 <= r["router_entropy_ratio"] <= 1
        assert r["router_z"] >= r["log_z"] ** 2 - 1e-6  # E[X^2] >= E[X]^2
        assert r["log_z_max"] >= r["log_z"]


def test_router_probabilities_and_log_z_match_the_gate():
    torch.manual_seed(1)
    model = _MoE(2)
    x, y = torch.randn(40, 16), torch.randint(0, 5, (40,))
    with Tracer(model) as tracer:
        logits = model.gate(x).detach()
        z, _ = model(x)
        F.cross_entropy(z, y).backward()
        tracer.step()
    (r,) = [r for r in site_records(tracer) if r["type"] == "router"]
    lse = torch.logsumexp(logits, -1)
    assert r["expert_prob"] == pytest.approx(torch.softmax(logits, -1).mean(0).tolist(), abs=1e-6)
    assert r["log_z"] == pytest.approx(float(lse.mean()), abs=1e-5)
    assert r["log_z_max"] == pytest.approx(float(lse.max()), abs=1e-5)
    assert r["router_z"] == pytest.approx(float(lse.square().mean()), abs=1e-5)
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1).mean()
    assert r["router_entropy_ratio"] == pytest.approx(math.exp(float(entropy)) / 4, abs=1e-5)


def test_a_collapsed_router_raises_balance_alarms_naming_the_fix():
    torch.manual_seed(0)
    model = _MoE(1)
    with torch.no_grad():
        model.gate.weight.zero_()
        model.gate.weight[0] = 5.0  # every token with a positive feature sum goes to expert 0
    x = torch.randn(64, 16).abs()
    y = torch.randint(0, 5, (64,))
    with pytest.warns(CollapseWarning), Tracer(model) as tracer:
        for _ in range(DEFAULT_THRESHOLDS.window):
            F.cross_entropy(model(x)[0], y).backward()
            tracer.step()
    fired = {a["alarm"]: a for a in tracer.alarms if a["site"] == "gate.router"}
    assert {"expert_overload", "dead_experts"} <= fired.keys()
    assert fired["dead_experts"]["value"] == 3.0
    assert fired["dead_experts"]["step"] == DEFAULT_THRESHOLDS.window - 1
    assert fired["expert_overload"]["value"] == 4.0
    assert "GShard" in fired["expert_overload"]["message"]
    assert "balancing loss" in fired["dead_experts"]["message"]
    assert "Likely cause: router collapse" in fired["dead_experts"]["message"]


def _hf_moe(name: str, **extra) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    common = {
        "vocab_size": 48,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32,
    }
    if name == "mixtral":
        cfg = transformers.MixtralConfig(
            intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, **common, **extra
        )
        cls = transformers.MixtralForCausalLM
    else:
        cfg = transformers.Qwen2MoeConfig(
            intermediate_size=48,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=24,
            num_experts=4,
            num_experts_per_tok=2,
            **common,
            **extra,
        )
        cls = transformers.Qwen2MoeForCausalLM
    return cls._from_config(cfg, attn_implementation="sdpa")


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_a_hugging_face_moe_built_from_its_config(name):
    torch.manual_seed(0)
    model = _hf_moe(name)
    routed: dict[str, torch.Tensor] = {}
    for path, module in model.named_modules():
        if path.endswith("mlp.gate"):
            module.register_forward_hook(
                lambda m, a, out, path=path: routed.__setitem__(path, out[-1].detach())
            )
    ids = torch.randint(0, 48, (2, 12))
    with warnings.catch_warnings(), Tracer(model) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        model(input_ids=ids, labels=ids).loss.backward()
        tracer.step()
    routers = {r["site"]: r for r in site_records(tracer) if r["type"] == "router"}
    assert set(routers) == {f"model.layers.{i}.mlp.gate.router" for i in range(2)}
    for site, r in routers.items():
        index = routed[site.removesuffix(".router")]
        load = torch.bincount(index.reshape(-1), minlength=4).double() / index.numel()
        assert r["top_k"] == 2 and r["rows"] == 24
        assert r["expert_load"] == pytest.approx(load.tolist())
        assert r["exact"] is True and r["residual"] <= 1e-5


@pytest.mark.parametrize("with_model", [True, False])
def test_prediction_softmaxes_under_no_grad_create_no_site(with_model):
    """Predictions, accuracy and top-k accuracy computed from a softmax under `no_grad`
    after `step()` (so inside the next measured step) are no site: with and without a model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    x, y = torch.randn(64, 8), torch.randint(0, 5, (64,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with Tracer(model if with_model else None) as tracer:
        for _ in range(4):
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
            with torch.no_grad():
                probs = torch.softmax(model(x), dim=1)
                confidence, predicted = probs.max(dim=1)
                top2 = probs.topk(2, dim=1).indices
                assert (predicted == y).float().mean() >= 0 and top2.shape == (64, 2)
                assert float(confidence.min()) > 0
    assert {r["type"] for r in site_records(tracer)} == {"classification"}
    assert len(site_records(tracer)) == 4
    assert tracer.alarms == [] or {a["site"] for a in tracer.alarms} == {"ce"}


def test_a_softmax_with_a_gradient_but_no_dispatch_is_no_router():
    """A probability-level loss (a Brier score) takes a gradient through a softmax of 2-D
    rows, and an `argmax` reads accuracy from it: no dispatch of tokens, no router."""
    torch.manual_seed(0)
    model = nn.Linear(8, 5)
    x, y = torch.randn(32, 8), torch.randint(0, 5, (32,))
    with Tracer(model) as tracer:
        probs = torch.softmax(model(x), dim=-1)
        accuracy = (probs.argmax(-1) == y).float().mean()
        (probs - F.one_hot(y, 5).float()).square().sum(-1).mean().backward()
        F.cross_entropy(model(x), y).backward()
        tracer.step()
    assert 0 <= float(accuracy) <= 1
    assert [r["type"] for r in site_records(tracer)] == ["classification"]


def test_a_router_is_measured_in_the_probe_pass_under_no_grad():
    """The tracer's own probe runs the model under `no_grad`: its routers stay sites there
    (churn is read from them)."""
    torch.manual_seed(0)
    model = _MoE(2)
    x, y = torch.randn(48, 16), torch.randint(0, 5, (48,))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with Tracer(model, probe=x) as tracer:
        for _ in range(3):
            F.cross_entropy(model(x)[0], y).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    routers = [r for r in site_records(tracer) if r["type"] == "router"]
    assert [r["site"] for r in routers] == ["gate.router"] * 3
    assert routers[0]["churn"] is None and all(0 <= r["churn"] <= 1 for r in routers[1:])


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_the_balancing_loss_recount_of_the_routing_is_no_router(name):
    """With the balancing loss on, the model's loss runs its own softmax and `topk` over the
    gate logits of every layer; only the layers' routers, whose gates carry a gradient, are
    sites."""
    torch.manual_seed(0)
    model = _hf_moe(name, output_router_logits=True, router_aux_loss_coef=0.02)
    ids = torch.randint(0, 48, (2, 12))
    with warnings.catch_warnings(), Tracer(model) as tracer:
        warnings.simplefilter("ignore", CollapseWarning)
        out = model(input_ids=ids, labels=ids)
        assert float(out.aux_loss.detach()) > 0
        out.loss.backward()
        tracer.step()
    routers = {r["site"] for r in site_records(tracer) if r["type"] == "router"}
    assert routers == {f"model.layers.{i}.mlp.gate.router" for i in range(2)}

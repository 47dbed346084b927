"""A site's gradient is its own loss's alone, however many losses share its input: the
responsibilities read from it match the forward softmax, and no alarm fires on an artefact."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from implicit_em import objectives
from implicit_em.trace import CollapseWarning, Tracer

from .conftest import site_records


def _trace(loss_of: callable, steps: int = 3) -> tuple[Tracer, list[torch.Tensor]]:
    """Train a linear head for a few steps with the loss `loss_of(z, y)` of its logits
    `z`; return the tracer and the forward softmax of each step."""
    torch.manual_seed(0)
    model = nn.Linear(6, 5)
    x, y = torch.randn(32, 6), torch.randint(0, 5, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    forward = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", CollapseWarning)
        with Tracer(model) as tracer:
            for _ in range(steps):
                z = model(x)
                forward.append(torch.softmax(z.detach(), -1))
                loss_of(z, y).backward()
                opt.step()
                opt.zero_grad()
                tracer.step()
    return tracer, forward


def _assert_exact(tracer: Tracer, forward: list[torch.Tensor], sites: int) -> None:
    records = site_records(tracer)
    assert len(records) == sites * len(forward)
    for r in records:
        assert r["exact"] is True and r["residual"] <= 1e-5, r
        expected = forward[r["step"]].mean(0)
        assert torch.allclose(
            torch.tensor(r["mass"], dtype=torch.float64), expected.double(), atol=1e-5
        )
    assert tracer.alarms == []


def test_cross_entropy_with_a_z_loss_on_the_same_logits():
    def loss(z, y):
        return F.cross_entropy(z, y) + 0.1 * torch.logsumexp(z, -1).square().mean()

    tracer, forward = _trace(loss)
    _assert_exact(tracer, forward, 1)


def test_cross_entropy_with_a_distillation_term_on_the_same_logits():
    teacher = torch.softmax(torch.randn(32, 5) * 3, -1)

    def loss(z, y):
        kl = F.kl_div(F.log_softmax(z / 2.0, -1), teacher, reduction="batchmean")
        return F.cross_entropy(z, y) + 4.0 * kl

    tracer, forward = _trace(loss)
    _assert_exact(tracer, forward, 1)


def test_two_cross_entropy_heads_sharing_their_logits():
    other = torch.randint(0, 5, (32,))

    def loss(z, y):
        return F.cross_entropy(z, y) + 0.5 * F.cross_entropy(z, other)

    tracer, forward = _trace(loss)
    _assert_exact(tracer, forward, 2)


def test_nll_of_a_log_softmax_next_to_a_z_loss():
    def loss(z, y):
        return F.nll_loss(F.log_softmax(z, 1), y) + 0.1 * torch.logsumexp(z, -1).square().mean()

    tracer, forward = _trace(loss)
    _assert_exact(tracer, forward, 1)


def test_an_inexact_record_is_marked_and_raises_no_alarm():
    """The package's objectives announce their site after computing the loss, so a distance
    tensor that also feeds another loss gives a gradient that is not the site's alone: the
    residual shows it, the record is not exact, and its collapsed mass raises no alarm."""
    d = torch.tensor([[0.0, 30.0, 30.0]]).repeat(16, 1).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CollapseWarning)
        with Tracer() as tracer:
            (objectives.mixture_nll(d) + d.square().mean()).backward()
            tracer.step()
    (record,) = site_records(tracer)
    assert record["exact"] is False and record["residual"] > record["tolerance"]
    assert tracer.alarms == []


def test_every_record_carries_its_residual_and_tolerance():
    tracer, _ = _trace(lambda z, y: F.cross_entropy(z, y), steps=1)
    (record,) = site_records(tracer)
    assert record["tolerance"] == 1e-4 and record["exact"] is True

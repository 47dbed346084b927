"""The capture's kept buffers: reused from one measured step to the next, never read after
reuse; a tracer that reuses them records what one that allocates anew records."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from implicit_em.attention import attention
from implicit_em.trace import Tracer

VOCAB, WIDTH, HEADS = 13, 16, 2


class _Tiny(nn.Module):
    """One SDPA and one eager causal attention layer, then a language-model head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.qkv2 = nn.Linear(WIDTH, 3 * WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def _heads(self, x: torch.Tensor, qkv: nn.Linear) -> tuple[torch.Tensor, ...]:
        b, length, _ = x.shape
        return tuple(
            t.view(b, length, HEADS, -1).transpose(1, 2) for t in qkv(x).split(WIDTH, dim=-1)
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        b, length, _ = x.shape
        o = F.scaled_dot_product_attention(*self._heads(x, self.qkv), is_causal=True)
        x = x + o.transpose(1, 2).reshape(b, length, WIDTH)
        o, _ = attention(*self._heads(x, self.qkv2), is_causal=True)
        x = x + o.transpose(1, 2).reshape(b, length, WIDTH)
        return self.head(x)


def _batch(step: int, rows: int = 4, length: int = 6) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(step))


def _run(
    steps: int,
    reuse: bool,
    probe: bool = False,
    micro_batches: int = 1,
    before_step: Callable[[Tracer], None] | None = None,
) -> list[dict]:
    """The records of `steps` measured training steps of `_Tiny`; without `reuse` the kept
    buffers are dropped after every step (each measured step allocates anew)."""
    torch.manual_seed(0)
    model = _Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    probe_ids = _batch(-1)
    kwargs = {"probe": probe_ids} if probe else {}
    with Tracer(model, flush_every=1, max_rows=2, max_responsibility_rows=16, **kwargs) as tracer:
        for step in range(steps):
            ids = _batch(step)
            parts = ids.chunk(micro_batches)
            for i, part in enumerate(parts):
                logits = model(part)
                loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), part[:, 1:].flatten())
                (loss / micro_batches).backward()
                if i < len(parts) - 1:
                    tracer.micro_batch()
            opt.step()
            opt.zero_grad()
            if before_step is not None:
                before_step(tracer)
            tracer.step()
            if not reuse:
                tracer.capture.buffers.clear()
    return [r for r in tracer.history if r["kind"] == "site"]


def _same(a: list[dict], b: list[dict]) -> None:
    """Equal records (NaN equal to NaN)."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            u, v = x[key], y[key]
            if isinstance(u, float) and math.isnan(u):
                assert isinstance(v, float) and math.isnan(v), key
            else:
                assert u == v, (x["step"], x["site"], key, u, v)


def test_a_steady_measured_step_keeps_its_copies_in_the_previous_steps_buffers():
    """The first measured step's copies are laid out anew (the copies of one role and shape
    in one block); from the second on, every step keeps its copies in the same buffers."""
    lent: list[list[torch.Tensor]] = []  # held: a buffer freed could come back at its address
    _run(5, reuse=True, before_step=lambda t: lent.append([b for _, b in t.capture.current.lent]))
    assert len(lent[0]) == 16  # six tensors of each attention site, four of the cross-entropy
    second = [t.data_ptr() for t in lent[1]]
    assert len(set(second)) == 16
    for later in lent[2:]:
        assert [t.data_ptr() for t in later] == second


def test_kept_copies_of_one_role_stack_as_a_view():
    """Once laid out, the copies of one field of equally shaped sites stack without a copy,
    and the view holds what `torch.stack` would."""
    from implicit_em.trace.capture import KeptBuffers
    from implicit_em.trace.sites.base import consecutive

    buffers = KeptBuffers()
    sources = [torch.randn(2, 3, 4) for _ in range(3)]
    first = [(role, buffers.copy(t, role)) for t in sources for role in ("q", "k")]
    assert consecutive([b for role, b in first if role == "q"]) is None  # not laid out yet
    buffers.refill(first)
    again = {role: [buffers.copy(t, role) for t in sources] for role in ("q", "k")}
    for role, copies in again.items():
        stacked = consecutive(copies)
        assert stacked is not None and stacked.data_ptr() == copies[0].data_ptr()
        assert torch.equal(stacked, torch.stack(sources)), role
    assert consecutive(again["q"][::-1]) is None and consecutive(again["q"][:1] * 2) is None


def test_buffers_of_shapes_no_longer_kept_are_released():
    """After each measured step the free buffers are one per copy of that step (the same
    roles and shapes; the same buffers once laid out), none of an earlier sequence length."""
    torch.manual_seed(0)
    model = _Tiny()
    with Tracer(model) as tracer:
        for step, length in enumerate((6, 6, 6, 5)):
            logits = model(_batch(0, length=length))
            F.cross_entropy(logits.flatten(0, 1), _batch(1, length=length).flatten()).backward()
            lent = [(str(role), t.shape, t.data_ptr()) for role, t in tracer.capture.current.lent]
            tracer.step()
            free = [
                (str(role), t.shape, t.data_ptr())
                for (role, _, _), f in tracer.capture.buffers.free.items()
                for t in f
            ]
            assert sorted(f[:2] for f in free) == sorted(f[:2] for f in lent)
            if step == 2:  # laid out at the first step: the second and third use the same
                assert sorted(free) == sorted(lent)
    assert tracer.capture.buffers.free == {}


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_records_are_those_of_a_tracer_that_allocates_anew(micro_batches):
    reused = _run(5, reuse=True, micro_batches=micro_batches)
    fresh = _run(5, reuse=False, micro_batches=micro_batches)
    assert {r["site"] for r in reused} == {"attention", "attention#2", "head.ce"}
    _same(reused, fresh)


def test_the_kept_probe_state_is_not_overwritten_by_the_next_step():
    """The drift probe compares each probe measurement with the previous one, kept across a
    step whose capture reuses the buffers the previous probe's copies were in."""
    reused = _run(5, reuse=True, probe=True)
    fresh = _run(5, reuse=False, probe=True)
    drift = [r["value_drift"] for r in reused if r["type"] == "attention" and r["step"] > 0]
    assert len(drift) == 8 and all(d > 0 for d in drift)
    _same(reused, fresh)


def test_copies_kept_under_inference_mode_are_not_reused_outside_it():
    torch.manual_seed(0)
    model = _Tiny()

    def probe() -> None:
        with torch.inference_mode():
            model(_batch(-1))

    with Tracer(model, probe=probe) as tracer:
        for step in range(3):
            logits = model(_batch(step))
            F.cross_entropy(logits.flatten(0, 1), _batch(step + 1).flatten()).backward()
            tracer.step()
    steps = [r["step"] for r in tracer.history if r["kind"] == "site" and r["site"] == "attention"]
    assert steps == [0, 1, 2]

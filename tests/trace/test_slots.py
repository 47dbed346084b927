"""Slot buffers: copies kept in preallocated rows, reused window after window."""

from __future__ import annotations

import torch

from implicit_em.trace.slots import Slots


def test_rows_are_reused_and_hold_copies_without_autograd_history():
    slots = Slots(capacity=3, max_bytes=2**20)
    w = torch.randn(4, 5, requires_grad=True)
    x = torch.randn(2, 5)
    first = slots.keep(("site", "forward"), 0, [w, x[:1]])
    again = slots.keep(("site", "forward"), 0, [w * 2, x[1:]])
    assert first[0].data_ptr() == again[0].data_ptr()
    assert torch.equal(again[0], (w * 2).detach()) and torch.equal(again[1], x[1:])
    assert not again[0].requires_grad and again[0].grad_fn is None
    other = slots.keep(("site", "forward"), 1, [w, x[:1]])
    assert other[0].data_ptr() != first[0].data_ptr()
    assert slots.allocated == 3 * (20 + 5) * 4 and slots.cloned == 0


def test_copies_are_cast_to_the_dtypes_asked_for():
    slots = Slots(capacity=2, max_bytes=2**20)
    half = torch.randn(3, 4).half()
    (kept,) = slots.keep(("site", "forward"), 1, [half], (torch.float32,))
    assert kept.dtype == torch.float32 and torch.equal(kept, half.float())


def test_without_a_slot_or_room_the_copies_are_clones_and_counted():
    x = torch.randn(8, 8)
    probe = Slots(capacity=2, max_bytes=2**20)
    (a,) = probe.keep(("site", "forward"), None, [x])
    assert probe.allocated == 0 and probe.cloned == x.nbytes and torch.equal(a, x)
    small = Slots(capacity=2, max_bytes=x.nbytes)
    (b,) = small.keep(("site", "forward"), 0, [x])
    assert small.allocated == 0 and small.cloned == x.nbytes
    a.zero_(), b.zero_()
    assert x.abs().sum() > 0


def test_each_site_keeps_at_most_max_shapes_sets_of_buffers():
    slots = Slots(capacity=2, max_bytes=2**20, max_shapes=2)
    for n in (3, 4, 5, 3):
        slots.keep(("site", "forward"), 0, [torch.ones(n)])
    assert slots.allocated == 2 * (3 + 4) * 4
    assert slots.cloned == 5 * 4


def test_a_destination_row_is_the_row_keep_would_fill():
    """A gradient hook (or a product's ``out=``) writes into a row chosen in advance: the same
    buffers as :meth:`Slots.keep` for that key, shape and dtype; None without a slot or room."""
    slots = Slots(capacity=2, max_bytes=2**20)
    g = torch.randn(3, 4)
    row = slots.destination(("site", "grad"), 1, g.shape, torch.float32, g.device)
    (kept,) = slots.keep(("site", "grad"), 1, [g], (torch.float32,))
    assert row is not None and row.data_ptr() == kept.data_ptr()
    assert slots.destination(("site", "grad"), None, g.shape, torch.float32, g.device) is None
    full = Slots(capacity=2, max_bytes=0)
    assert full.destination(("site", "grad"), 0, g.shape, torch.float32, g.device) is None

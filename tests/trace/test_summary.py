"""The bounded summary of a measured step: percentiles over sites, worst sites, alarm count."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from implicit_em.trace.summary import key_bound, quantile, summarize


def _site(name: str, kind: str, **metrics) -> dict:
    return {"kind": "site", "step": 3, "site": name, "type": kind, "K": 4, "rows": 8.0, **metrics}


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=40), st.sampled_from([0.5, 0.9]))
def test_quantile_is_numpys_linear_quantile(values, q):
    assert quantile(sorted(values), q) == pytest.approx(np.quantile(values, q), abs=1e-6)


def test_percentiles_worst_sites_and_alarms():
    records = [
        _site(f"h.{i}.attn", "attention", entropy=float(i), head_entropy=[1.0]) for i in range(10)
    ]
    records += [
        _site("lm_head.ce", "classification", effective_k=2.0, residual=None, source="gradient"),
        {"kind": "alarm", "step": 3, "site": "lm_head.ce", "alarm": "effective_k"},
    ]
    out = summarize(records, top_k=2)
    assert out["trace/attention/entropy/p50"] == 4.5
    assert out["trace/attention/entropy/p90"] == pytest.approx(8.1)
    assert out["trace/attention/entropy/max"] == 9.0
    assert out["trace/attention/worst/h.0.attn"] == 0.0
    assert out["trace/attention/worst/h.1.attn"] == 1.0
    assert out["trace/classification/worst/lm_head.ce"] == 2.0
    assert out["trace/alarms"] == 1.0
    assert not any("residual" in k or "/K/" in k or "rows" in k or "head_entropy" in k for k in out)


def test_key_count_is_bounded_independently_of_the_number_of_sites():
    def step(depth: int) -> dict:
        records = [
            _site(f"h.{i}", "attention", entropy=1.0 + i, routing_norm=0.5) for i in range(depth)
        ]
        return summarize(records, top_k=3)

    assert len(step(3)) == len(step(300)) == key_bound({"attention": 2}, top_k=3)


def test_negative_top_k_is_refused():
    with pytest.raises(ValueError, match="top_k"):
        summarize([], top_k=-1)

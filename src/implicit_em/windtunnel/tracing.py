r"""Two-timescale tracing of the wind-tunnel GPT's attention (claim C12).

`AttentionTrace` wraps `implicit_em.trace.Tracer` around training, restricted to the
attention sites `blocks.*.attn`, with a fixed probe batch. Every `every` steps it records, per
layer, the probe's attention drift (mean total variation of $\alpha$ since the previous
measurement: the E-step's timescale) and value drift (relative change of the values
$v_j$: the M-step's timescale), with the routing and value gradient norms of the training
batch. Records carry `global_step` (training steps completed) so that a resumed run continues
its series; the first measurement of each session has no drift (there is no previous one).
"""

from __future__ import annotations

import statistics
from types import TracebackType
from typing import Any

from torch import Tensor, nn

from implicit_em.trace import Tracer

__all__ = ["SITES", "AttentionTrace", "drift_series", "summarize_trace"]

SITES = "blocks.*.attn"


class AttentionTrace:
    """Context manager: `with AttentionTrace(model, probe, every, records, start) as t: ... t.step()`.

    `records` (a list, e.g. restored from a checkpoint) receives the new records; `start` is
    the number of training steps completed before this session. `quiet` runs code (the
    held-out evaluation) without it reaching the tracer.
    """

    def __init__(
        self, model: nn.Module, probe: Tensor, every: int, records: list[dict[str, Any]], start: int
    ) -> None:
        # flush_every=1: each measurement's record exists before the next checkpoint is written.
        self.tracer = Tracer(model, sites=SITES, every=every, probe=probe, flush_every=1)
        self.records = records
        self.start = start
        self._taken = 0

    def __enter__(self) -> AttentionTrace:
        self.tracer.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.tracer.__exit__(exc_type, exc, tb)
        self._collect()

    def step(self) -> None:
        """End of a training step: measure if due and keep the new records."""
        self.tracer.step()
        self._collect()

    def _collect(self) -> None:
        """Keep the attention records the tracer has written since the last call."""
        history = self.tracer.history
        for record in list(history)[self._taken :]:
            if record.get("type") == "attention":
                self.records.append({**record, "global_step": self.start + record["step"] + 1})
        self._taken = len(history)

    def quiet(self) -> Any:
        """A context whose forward passes the tracer does not see (`Tracer.paused`)."""
        return self.tracer.paused()


def summarize_trace(records: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    r"""Per attention site: median attention drift and value drift over the second half of the
    measurements, and their ratio $\text{value drift} / \text{attention drift}$ (> 1 when the
    values keep moving after the routing has settled: two timescales)."""
    out: dict[str, dict[str, float | None]] = {}
    for site in sorted({r["site"] for r in records}):
        rows = [r for r in records if r["site"] == site]
        late = rows[len(rows) // 2 :]
        att = [r["attention_drift"] for r in late if r.get("attention_drift") is not None]
        val = [r["value_drift"] for r in late if r.get("value_drift") is not None]
        a = statistics.median(att) if att else None
        v = statistics.median(val) if val else None
        out[site] = {
            "attention_drift": a,
            "value_drift": v,
            "value_over_attention": v / a if a and v is not None else None,
        }
    return out


def drift_series(
    records: list[dict[str, Any]],
) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """Per site, `(global steps, values)` of `attention_drift` and `value_drift`."""
    out: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for site in sorted({r["site"] for r in records}):
        rows = [r for r in records if r["site"] == site]
        out[site] = {
            key: (
                [r["global_step"] for r in rows if r.get(key) is not None],
                [r[key] for r in rows if r.get(key) is not None],
            )
            for key in ("attention_drift", "value_drift")
        }
    return out

"""A `Tracer` driven by a trainer's hooks, which the framework callbacks share.

A trainer calls `resume` when an optimizer step begins, `micro_batch` after each micro-batch
but the last under gradient accumulation, and `end_step` after the optimizer step. Between
`end_step` and the next `resume` (evaluation, checkpointing, logging) the tracer is paused, so
nothing the trainer runs there is traced. Steps are counted like the trainer's global step
(the first optimizer step is step `first_step`), so the measured steps (every `every`-th) are
the trainer's logging steps when `every` is its logging interval, and records carry the
trainer's step numbers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from torch import nn

from implicit_em.trace.records import Record
from implicit_em.trace.sinks import Sink
from implicit_em.trace.summary import summarize
from implicit_em.trace.tracer import Tracer

__all__ = ["Monitor", "StepSink", "stop_message"]

logger = logging.getLogger("implicit_em.trace")


class StepSink:
    """Keeps the records written since the last `take` (one measured step's, with
    `flush_every=1`)."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def write(self, records: Sequence[Record]) -> None:
        self.records.extend(records)

    def close(self) -> None:
        return None

    def take(self) -> list[Record]:
        records, self.records = self.records, []
        return records


class Monitor:
    """A tracer measuring every `every`-th optimizer step of a trainer, paused in between.

    Parameters
    ----------
    model : nn.Module
        The model the trainer trains.
    every : int
        Measure every `every`-th optimizer step (those whose number is a multiple of it).
    first_step : int
        The number of the first optimizer step to come (1 for a new run; the global step
        plus one for a resumed run).
    top_k : int
        Worst sites named per site type in the summary (`implicit_em.trace.summary`).
    sinks : sequence of str or Sink
        More sinks for the full records (e.g. `"jsonl:PATH"`).
    options : dict
        More arguments of `Tracer` (`sites`, `probe`, `thresholds`, ...).
    through_optimizer_step : bool, default=False
        Keep capturing through the optimizer's step, for trainers whose optimizer step runs
        the forward and backward pass in a closure (Lightning).
    """

    def __init__(
        self,
        model: nn.Module,
        every: int,
        first_step: int,
        top_k: int,
        sinks: Sequence[str | Sink],
        options: dict[str, Any],
        through_optimizer_step: bool = False,
    ) -> None:
        self.top_k = top_k
        self._sink = StepSink()
        self.tracer = Tracer(model, every=every, sinks=list(sinks), flush_every=1, **options)
        self.tracer.step_index = first_step
        self.tracer.capture.through_optimizer_step = through_optimizer_step
        self._pause: contextlib.AbstractContextManager | None = None
        self.tracer.__enter__()
        self.tracer.sinks.append(self._sink)  # on every rank: each logs the same summary
        self._paused()

    def _paused(self) -> None:
        self._pause = self.tracer.paused()
        self._pause.__enter__()

    def resume(self) -> None:
        """An optimizer step begins: trace again (a no-op if not paused)."""
        if self._pause is not None:
            pause, self._pause = self._pause, None
            pause.__exit__(None, None, None)

    def micro_batch(self) -> None:
        """A micro-batch of the optimizer step ended; more follow (`Tracer.micro_batch`)."""
        self.tracer.micro_batch()

    def end_step(self) -> tuple[dict[str, float], list[Record]]:
        """The optimizer step ended: measure it if due, then pause.

        Returns
        -------
        summary : dict of str to float
            The bounded keys of the step (`summarize`); empty on a step not measured.
        alarms : list of dict
            The alarm records of the step.
        """
        self.resume()
        self.tracer.step()
        self._paused()
        records = self._sink.take()
        if not records:
            return {}, []
        alarms = [r for r in records if r["kind"] == "alarm"]
        return summarize(records, self.top_k), alarms

    def close(self) -> None:
        """Write what is buffered, close the sinks and remove everything installed."""
        self.resume()
        self.tracer.__exit__(None, None, None)


def stop_message(alarms: Sequence[Record]) -> str:
    """The warning logged when training stops on alarms."""
    return f"stopping training on {len(alarms)} collapse alarm(s); first: {alarms[0]['message']}"

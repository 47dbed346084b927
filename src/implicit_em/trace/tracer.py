r"""The `Tracer`: responsibilities read from gradients during ordinary training.

```python
with Tracer(model, sinks=["memory", "jsonl:runs/exp.jsonl"]) as tracer:
    for x, y in loader:
        loss = F.cross_entropy(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
        tracer.step()
tracer.history.to_pandas()
```

On a measured step (every `every`-th, starting with the first) the capture
(`implicit_em.trace.capture`) finds every site of the forward and backward pass and keeps
what each needs. At that step's `Tracer.step` the probe batch runs, the sites are reduced to
metrics (`implicit_em.trace.flush`: equally shaped sites in one batched pass), all-reduced
under DDP, made records (`implicit_em.trace.records`) and checked by the alarm rules
(`implicit_em.trace.alarms`); alarms reach every sink at once, site records every
`flush_every` measurements (and on leaving the `with` block). Between measured steps
nothing is installed.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.trace.alarms import DEFAULT_THRESHOLDS, Alarms, CollapseWarning, Thresholds
from implicit_em.trace.capture import Pass, Site, SiteCapture
from implicit_em.trace.distributed import rank
from implicit_em.trace.flush import metric_values
from implicit_em.trace.metrics import Stats
from implicit_em.trace.records import Record, site_record
from implicit_em.trace.sinks import History, MemorySink, Sink, make_sink
from implicit_em.trace.sites import SEARCHED

__all__ = ["CollapseWarning", "NoSiteError", "Thresholds", "Tracer"]


class NoSiteError(RuntimeError):
    """A measured step found no traceable site."""


ProbeSpec = Tensor | tuple | dict | Callable[[], Any]


class Tracer:
    r"""Context manager that traces responsibility and attention sites during training.

    Inside the `with` block, call `step` once per training step, after the backward pass. On
    every `every`-th step (starting with the first) the tracer finds each site of the forward
    and backward pass (a softmax cross-entropy, a mixture NLL, an attention layer, a
    mixture-of-experts router), reads its responsibilities back from the gradient and reduces
    them to the metrics of one record per site. The alarm rules (`implicit_em.trace.alarms`)
    read each step's records at that step's `step` call: its alarms reach every sink, and
    `alarms`, at once; site records go to the `sinks` (and, with the `"memory"` sink, to
    `history`) in batches. The fields of every record type are listed in
    `implicit_em.trace.records`.

    Parameters
    ----------
    model : nn.Module or None, default=None
        The model: it names the sites by module path and runs the probe (a
        `DistributedDataParallel` / `DataParallel` wrapper is looked through). `None` traces
        anonymous sites (named `ce`, `mixture`, ...).
    sites : str, sequence of str or None, default=None
        Glob pattern(s) of the site names to trace (e.g. `"transformer.h.*.attn"`); `None`
        traces every site.
    every : int, default=1
        Measure every `every`-th step (call `step` once per training step).
    measure_first : int, default=0
        Also measure each of the steps numbered below `measure_first` (counting from 0), so
        that a failure in the first steps of a run (an output layer at too high a rate shows
        in the loss within a few steps) is seen before the first `every`-th step. With
        `every=5`, `measure_first=10` measures steps 0-9, then 10, 15, ...
    probe : Tensor, tuple, dict, callable or None, default=None
        A fixed batch for `churn` and the two-timescale drift: model inputs (a tensor, a
        tuple of positional inputs or a dict of keyword inputs) or a callable running a
        forward pass (e.g. `lambda: F.cross_entropy(model(xp), yp)` to reach a loss outside
        the model). It runs in eval mode under `no_grad` on measured steps; training modes are
        restored, so training is unchanged. Inputs (not a callable) need `model`.
    sinks : sequence of str or Sink, default=("memory",)
        Where records go: `"memory"` (`history`), `"jsonl:PATH"` (one JSON object per line,
        read back with `History.from_jsonl`), `"tensorboard:LOGDIR"`, or sink objects with
        `write(records)` and `close()`. Under `torch.distributed` only rank 0 writes to the
        sinks other than `"memory"`.
    max_rows : int, default=1
        Batch rows of each attention site used for its metrics (one row already averages over
        `H` heads and `L` queries; the cost grows with it).
    max_responsibility_rows : int or None, default=512
        Rows of each responsibility site (classification, mixture) used for its metrics: a
        site with more rows $N$ (a language model's batch × sequence tokens) uses every
        $\lceil N/512\rceil$-th row, an evenly spread sample; `None` uses all. The `rows`
        metric counts the rows used; `nonfinite` counts over all rows. The cost and the
        memory of a measurement grow with it.
    max_components : int, default=256
        The per-component `mass` is recorded for sites with at most this many components
        (`None` above).
    thresholds : Thresholds, default=Thresholds()
        The thresholds of the alarm rules.
    rediscover : int or None, default=None
        Ignored, kept so that existing calls work (passing it warns): every measured step
        finds every site.
    flush_every : int, default=128
        Measured steps whose site records are buffered before they are written: site records
        reach the sinks in batches of this many measured steps, and on leaving the `with`
        block (also after an exception). Alarms are written at their step.
    flush_bytes : int or None, default=None
        Ignored, kept so that existing calls work (passing it warns): each measured step's
        kept tensors are reduced, and freed, at its `step` call.

    Attributes
    ----------
    step_index : int
        The number of `step` calls so far.
    measurements : int
        The number of measured steps that found a site.

    Raises
    ------
    ValueError
        If `every`, `flush_every`, `max_rows` or `max_responsibility_rows`
        is not a positive integer, or
        a probe batch is given without the model.
    NoSiteError
        From `step`, when the first measured step finds no
        traceable site; the message lists what was searched for, or the sites found but
        not selected by `sites`.

    Examples
    --------
    ```python
    with Tracer(model, every=10, sinks=["memory", "jsonl:runs/exp.jsonl"]) as tracer:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward(); opt.step(); opt.zero_grad()
            tracer.step()
            with tracer.paused():  # an evaluation pass, not traced
                val_loss = F.cross_entropy(model(x_val), y_val)
    frame = tracer.history.to_pandas()
    ```
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        sites: str | Sequence[str] | None = None,
        every: int = 1,
        measure_first: int = 0,
        probe: ProbeSpec | None = None,
        sinks: Sequence[str | Sink] = ("memory",),
        max_rows: int = 1,
        max_responsibility_rows: int | None = 512,
        max_components: int = 256,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        rediscover: int | None = None,
        flush_every: int = 128,
        flush_bytes: int | None = None,
    ) -> None:
        for arg, value in (("every", every), ("flush_every", flush_every)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{arg} must be a positive integer, got {value!r}")
        if not isinstance(measure_first, int) or measure_first < 0:
            raise ValueError(f"measure_first must be a non-negative integer, got {measure_first!r}")
        if not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be a positive integer, got {max_rows!r}")
        if max_responsibility_rows is not None and (
            not isinstance(max_responsibility_rows, int) or max_responsibility_rows < 1
        ):
            raise ValueError(
                "max_responsibility_rows must be a positive integer or None, "
                f"got {max_responsibility_rows!r}"
            )
        if probe is not None and model is None and not callable(probe):
            raise ValueError("a probe batch needs the model (or pass a callable probe)")
        if rediscover is not None:
            warnings.warn(
                "Tracer(rediscover=...) is ignored: every measured step finds every site",
                DeprecationWarning,
                stacklevel=2,
            )
        if flush_bytes is not None:
            warnings.warn(
                "Tracer(flush_bytes=...) is ignored: each measured step is reduced at its step()",
                DeprecationWarning,
                stacklevel=2,
            )
        self.model = model
        self.every = every
        self.measure_first = measure_first
        self.probe = probe
        self.max_components = max_components
        self.thresholds = thresholds
        self.flush_every = flush_every
        self.patterns = [sites] if isinstance(sites, str) else sites
        self._sink_specs = list(sinks)
        self.sinks: list[Sink] = []
        self.capture = SiteCapture(model, self.patterns, max_rows, max_responsibility_rows)
        self.step_index = 0
        self.measurements = 0
        self._active = False
        self._memory = MemorySink()
        self._pending: list[list[Record]] = []
        self._previous: dict[str, dict[str, Tensor]] = {}
        self._rules = Alarms(thresholds)
        self._alarms: list[Record] = []

    # -- context ----------------------------------------------------------------------------------

    def __enter__(self) -> Tracer:
        writer = rank() == 0
        self.sinks = []
        for spec in self._sink_specs:
            if spec == "memory":
                self.sinks.append(self._memory)
            elif writer:
                self.sinks.append(make_sink(spec))
        self._active = True
        if self._due():
            self.capture.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Measure a last unfinished step, write every buffered record and close the sinks.

        After an exception the step in progress is dropped (another rank may never reach
        its all-reduce) and the records of the steps measured before it are written.
        """
        try:
            if exc_type is None and self.capture.current.sites:
                self._measure()
            else:
                self.capture.take()
        finally:
            self.capture.stop()
            self.capture.buffers.clear()
            self._active = False
            try:
                self._flush()
            finally:
                for sink in self.sinks:
                    sink.close()

    @property
    def history(self) -> History:
        """Every record measured so far (with the `"memory"` sink).

        Alarms reach it at their step; site records in batches of `flush_every` measured
        steps, and all of them on leaving the `with` block.
        """
        return self._memory.history

    @property
    def alarms(self) -> list[Record]:
        """Every alarm record so far, in order: current after each `step` call (whatever
        the sinks)."""
        return list(self._alarms)

    def step(self) -> None:
        """Mark the end of a training step (after `backward`, typically after `opt.step()`).

        On a measured step the sites captured since the previous call (and the probe batch,
        if any) become records; the alarm rules read them, and their alarms reach every
        sink (and `alarms`) before this call returns. Site records are written every
        `flush_every` measurements.

        Raises
        ------
        RuntimeError
            If called outside the `with Tracer(...)` block.
        NoSiteError
            If the first measured step found no traceable site.
        """
        if not self._active:
            raise RuntimeError("Tracer.step() must be called inside the `with Tracer(...)` block")
        if self._due():
            self._measure()
        self.step_index += 1
        if self._due():
            self.capture.start()

    def _due(self) -> bool:
        """Whether the step `step_index` is measured."""
        return self.step_index < self.measure_first or self.step_index % self.every == 0

    def micro_batch(self) -> None:
        """Mark the end of a micro-batch under gradient accumulation (after its `backward`,
        before the next micro-batch of the same optimizer step).

        The sites of the next micro-batch take the same names as this one's, and on a
        measured step the statistics of sites sharing a name add up (sums and maxima, as
        across ranks): one record per site and optimizer step, over the rows of all its
        micro-batches. Call `step` once per optimizer step, as usual.
        """
        if not self._active:
            raise RuntimeError(
                "Tracer.micro_batch() must be called inside the `with Tracer(...)` block"
            )
        self.capture.current.counts.clear()

    @contextlib.contextmanager
    def paused(self) -> Iterator[Tracer]:
        """Run code untraced inside the `with Tracer(...)` block (an evaluation pass, a
        baseline step): everything the tracer installed is removed meanwhile (and the gradient
        hooks of a measured step in progress do nothing), and that step keeps what it captured
        before and resumes capturing after.

        ```python
        with tracer.paused():
            val_loss = F.cross_entropy(model(x_val), y_val)
        ```
        """
        if not self._active:
            raise RuntimeError("Tracer.paused() must be used inside the `with Tracer(...)` block")
        resume, suspended = self.capture.installed, self.capture.suspended
        self.capture.stop()
        self.capture.suspended = True
        try:
            yield self
        finally:
            self.capture.suspended = suspended
            if resume:
                self.capture.start()

    # -- measurement ------------------------------------------------------------------------------

    def _measure(self) -> None:
        """Reduce the sites of the finished measured step (and its probe statistics) to
        records, write their alarms, and buffer the records for the next flush (once
        `flush_every` measurements wait)."""
        done = self.capture.take()
        if not done.sites:
            if self.measurements == 0:
                raise NoSiteError(self._no_site_message())
            return
        passes, probe = [done], None
        if self.probe is not None:
            passes.append(self._run_probe())
            probe = self._probe_stats(done.sites, passes[-1])
        slots, first = _slots(done.sites)
        values = metric_values(done.sites, probe, self.thresholds.dead_fraction, slots=slots)
        self.capture.release(passes)
        probed = self.probe is not None
        records = [
            site_record(self.step_index, site, v, probed, self.max_components)
            for site, v in zip(first, values, strict=True)
        ]
        self.measurements += 1
        self._pending.append(records)
        alarms = [a for r in records for a in self._rules(r)]
        if alarms:
            self._alarms += alarms
            for sink in self.sinks:
                sink.write(alarms)
        if len(self._pending) >= self.flush_every:
            self._flush()

    def _flush(self) -> None:
        """Write every buffered site record, in step order."""
        pending, self._pending = self._pending, []
        out = [r for records in pending for r in records]
        if out:
            for sink in self.sinks:
                sink.write(out)

    def _no_site_message(self) -> str:
        where = "the traced code" if self.model is None else type(self.model).__name__
        n = len(self.capture.names)
        lines = [f"no traceable site in {where} ({n} modules) at step {self.step_index}."]
        if self.capture.seen:
            seen = sorted(self.capture.seen)
            lines.append(f"Sites found but not selected by sites={self.patterns}: {seen}")
        else:
            lines.append("Searched for: " + "; ".join(SEARCHED) + ".")
            lines.append(
                "Run the forward pass (and the loss) inside the `with Tracer(...)` block; "
                "attention must be one of the forms above."
            )
        return "\n".join(lines)

    def _run_probe(self) -> Pass:
        """Run the probe batch (eval mode, no gradients) under a fresh capture."""
        model = self.model
        modules = [] if model is None else list(model.modules())
        modes = [m.training for m in modules]
        self.capture.start()
        self.capture.probing = True
        try:
            if model is not None:
                model.eval()
            with torch.no_grad():
                if callable(self.probe) and not isinstance(self.probe, Tensor | nn.Module):
                    self.probe()
                elif isinstance(self.probe, dict):
                    model(**self.probe)
                elif isinstance(self.probe, tuple):
                    model(*self.probe)
                else:
                    model(self.probe)
        finally:
            self.capture.probing = False
            for m, mode in zip(modules, modes, strict=True):
                m.training = mode
            probed = self.capture.take()
        return probed

    def _probe_stats(self, sites: list[Site], probed: Pass) -> list[Stats]:
        """Churn / drift statistics of the probe pass for each training site, against the
        previous probe measurement of the same site."""
        found = {s.name: s for s in probed.sites if s.kept is not None}
        out = []
        done: set[str] = set()
        for site in sites:
            p = None if site.name in done else found.get(site.name)
            done.add(site.name)
            now = None
            if p is not None and p.kind is site.kind:
                now = site.kind.probe_state(p.kept)
                self._previous[site.name], previous = now, self._previous.get(site.name)
            else:
                previous = None
            out.append(site.kind.probe_statistics(now, previous))
        return out


def _slots(sites: list[Site]) -> tuple[list[int] | None, list[Site]]:
    """The slot of every site of a measured step (`Tracer.micro_batch` gives the sites of the
    step's micro-batches equal names; one slot per name) and the first site of each slot; the
    slots are None when no name repeats."""
    index: dict[str, int] = {}
    slots: list[int] = []
    first: list[Site] = []
    for site in sites:
        if site.name not in index:
            index[site.name] = len(first)
            first.append(site)
        slots.append(index[site.name])
    return (slots if len(first) < len(slots) else None), first

r"""The :class:`Tracer`: responsibilities read from gradients during ordinary training.

.. code-block:: python

    with Tracer(model, sinks=["memory", "jsonl:runs/exp.jsonl"]) as tracer:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
            tracer.step()
    tracer.history.to_pandas()

On a measured step (every ``every``-th, starting with the first) the tracer arms the site capture
(:mod:`implicit_em.trace.sites`) for the forward and backward pass, which copies what each site
needs into preallocated slot buffers; at :meth:`Tracer.step` it runs the probe batch. Every
``flush_every`` measurements (and on leaving the ``with`` block) it reduces all buffered
measurements to statistics in batches (:mod:`implicit_em.trace.batch`), all-reduces them under
DDP, raises collapse alarms and writes one record per site per measured step. Between measured
steps nothing is armed: no hooks, no mode, no host synchronization, only a counter; consecutive
measured steps (``every=1``) keep the module hooks of their plan registered.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from implicit_em.trace.batch import Group, group_stats
from implicit_em.trace.distributed import rank, reduce_stats
from implicit_em.trace.metrics import (
    Stats,
    churn_stats,
    drift_stats,
    finish_attention,
    finish_probe,
    finish_responsibility,
)
from implicit_em.trace.sinks import History, MemorySink, Record, Sink, make_sink
from implicit_em.trace.sites import (
    SEARCHED,
    AttentionCall,
    CapturedPass,
    Plan,
    ResponsibilityCall,
    SiteCapture,
    untraced,
)
from implicit_em.trace.slots import Slots

__all__ = ["CollapseWarning", "NoSiteError", "Thresholds", "Tracer"]

logger = logging.getLogger("implicit_em.trace")

_FLAGS = ("n_grad", "churn_n", "drift_rows", "value_prev_sq")
"""Statistics that decide which metrics are missing (``_<flag>`` in a call's values)."""

_PRIVATE = ("n_grad", *("_" + flag for flag in _FLAGS))
"""Keys of a call's values that are not written to its record."""

_GRADIENT_METRICS = {
    "classification": ("residual", "wrong_entropy", "wrong_top"),
    "mixture": ("residual",),
    "attention": ("routing_norm", "value_norm", "routing_value_ratio", "value_residual"),
}


class NoSiteError(RuntimeError):
    """A measured step found no traceable site."""


class CollapseWarning(UserWarning):
    """A collapse alarm (issued once per site and alarm; every alarm is also a record)."""


@dataclass(frozen=True)
class Thresholds:
    """Collapse alarms of responsibility sites with K > 1.

    Attributes:
        dominance: alarm when one component holds more than this share of the mass.
        effective_k: alarm when :math:`\\exp H(\\bar r)` falls below this.
        dead_fraction: a component is dead when its mass is below ``dead_fraction / K``;
            any dead component raises an alarm.
        scale_ratio: alarm when the distance scale falls below this fraction of its first value.
    """

    dominance: float = 0.9
    effective_k: float = 1.5
    dead_fraction: float = 0.01
    scale_ratio: float = 0.1


ProbeSpec = Tensor | tuple | dict | Callable[[], Any]


@dataclass
class _Measured:
    """One measured step waiting for the next flush: its sites and their probe statistics."""

    step: int
    calls: list[ResponsibilityCall | AttentionCall]
    probe: list[Stats] = field(default_factory=list)


class Tracer:
    """Context manager that traces responsibility and attention sites during training.

    Args:
        model: the model (names sites by module path, runs the probe); None for anonymous sites.
        sites: glob pattern(s) of site names to trace (``"transformer.h.*.attn"``); None: all.
        every: measure every ``every``-th step (call :meth:`step` once per training step).
        probe: a fixed batch for churn and two-timescale drift: model inputs (a tensor, a tuple
            of positional inputs or a dict of keyword inputs) or a callable running a forward
            pass (e.g. ``lambda: F.cross_entropy(model(xp), yp)`` to reach a loss outside the
            model). It runs in eval mode under ``no_grad`` on measured steps; training modes are
            restored, so training is unchanged.
        sinks: ``"memory"``, ``"jsonl:PATH"``, ``"tensorboard:LOGDIR"`` or sink objects.
        max_rows: batch rows of each attention site used for its metrics. Its cost is about
            ``max_rows / B`` of the attention block's forward and backward for batch size
            ``B`` (the weights are recomputed, :math:`O(H L^2)` per row), and buffered inputs
            grow with it; one row already averages over ``H`` heads and ``L`` queries.
        max_components: per-component mass is recorded for sites with at most this many.
        thresholds: collapse alarm thresholds.
        rediscover: run a full site discovery every ``rediscover`` measurements (1: always);
            once two discoveries in a row agree, the measurements between follow their plan
            narrowly (see :class:`~implicit_em.trace.sites.SiteCapture`), and a narrow pass
            that finds a different set of sites triggers a discovery at the next measurement.
        flush_every: measurements buffered before their statistics are computed (in one batched
            pass per group of equally shaped sites) and written; records reach the sinks in
            batches of this many measured steps, and on leaving the ``with`` block (also after an
            exception); a process killed outright loses at most ``flush_every - 1``
            measurements. A flush costs mostly a fixed number of tensor operations, so longer
            batches cost less per measurement; memory is bounded by ``flush_every`` times the
            captured rows of every site.
        flush_bytes: the bytes of the buffers that keep what measured steps capture
            (:class:`~implicit_em.trace.slots.Slots`, 256 MiB by default); sites beyond it keep
            copies of their own, and the tracer flushes early once those hold this many bytes,
            so long sequences and many sites cannot exhaust memory.
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        sites: str | Sequence[str] | None = None,
        every: int = 1,
        probe: ProbeSpec | None = None,
        sinks: Sequence[str | Sink] = ("memory",),
        max_rows: int = 1,
        max_components: int = 256,
        thresholds: Thresholds = Thresholds(),
        rediscover: int = 100,
        flush_every: int = 128,
        flush_bytes: int = 2**28,
    ) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        if not isinstance(rediscover, int) or rediscover < 1:
            raise ValueError(f"rediscover must be a positive integer, got {rediscover!r}")
        if not isinstance(flush_every, int) or flush_every < 1:
            raise ValueError(f"flush_every must be a positive integer, got {flush_every!r}")
        if not isinstance(flush_bytes, int) or flush_bytes < 1:
            raise ValueError(f"flush_bytes must be a positive integer, got {flush_bytes!r}")
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if probe is not None and model is None and not callable(probe):
            raise ValueError("a probe batch needs the model (or pass a callable probe)")
        self.model = model
        self.every = every
        self.probe = probe
        self.max_components = max_components
        self.thresholds = thresholds
        self.rediscover = rediscover
        self.flush_every = flush_every
        self.flush_bytes = flush_bytes
        self.patterns = [sites] if isinstance(sites, str) else sites
        self._sink_specs = list(sinks)
        self.sinks: list[Sink] = []
        self.capture = SiteCapture(model, self.patterns, max_rows, Slots(flush_every, flush_bytes))
        self.step_index = 0
        self.measurements = 0
        self.discoveries = 0
        self._plan: Plan | None = None
        self._candidate: Plan | None = None
        self._narrow_passes = 0
        self._active = False
        self._memory = MemorySink()
        self._pending: list[_Measured] = []
        self._previous: dict[str, dict[str, Tensor | None]] = {}
        self._first_scale: dict[str, float] = {}
        self._warned: set[tuple[str, str]] = set()

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
        self._arm()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Measure a last unfinished step, write every buffered measurement and close the sinks.

        After an exception the buffered measurements are still written, but not all-reduced
        across ranks (another rank may never reach the collective): under DDP rank 0 then
        writes its own shard's statistics for them.
        """
        try:
            if exc_type is None and self.capture.current.calls:
                self._measure()
            else:
                self.capture.take()
        finally:
            self.capture.disarm()
            self._active = False
            try:
                self._flush(across_ranks=exc_type is None)
            finally:
                for sink in self.sinks:
                    sink.close()

    @property
    def history(self) -> History:
        """Every record measured so far (with the ``"memory"`` sink)."""
        return self._memory.history

    @property
    def alarms(self) -> list[Record]:
        return self.history.alarms()

    def step(self) -> None:
        """Mark the end of a training step (after ``backward``, typically after ``opt.step()``)."""
        if not self._active:
            raise RuntimeError("Tracer.step() must be called inside the `with Tracer(...)` block")
        if self.step_index % self.every == 0:
            self._measure()
        self.step_index += 1
        if self.step_index % self.every == 0:
            self.capture.close()
            self._arm()
        else:
            self.capture.disarm()

    @contextlib.contextmanager
    def paused(self) -> Iterator[Tracer]:
        """Run code untraced inside the ``with Tracer(...)`` block (an evaluation pass, a
        baseline step): nothing in it is captured, and a measured step in progress keeps what
        it captured before and resumes capturing after.

        .. code-block:: python

            with tracer.paused():
                val_loss = F.cross_entropy(model(x_val), y_val)
        """
        if not self._active:
            raise RuntimeError("Tracer.paused() must be used inside the `with Tracer(...)` block")
        state = self.capture.suspend()
        try:
            yield self
        finally:
            self.capture.resume(state)

    def _arm(self) -> None:
        """Arm the next measured step: narrow along the plan, or a full discovery."""
        narrow = self._plan is not None and self._narrow_passes < self.rediscover - 1
        self.capture.slot = len(self._pending)
        self.capture.arm(self._plan if narrow else None)

    def _follow(self, done: CapturedPass) -> None:
        """Keep, renew or drop the plan after a training pass: a plan is followed once two
        discoveries in a row agree on it, until a narrow pass disagrees with it."""
        if done.plan is None:
            self.discoveries += 1
            found = done.to_plan()
            confirmed = found is not None and found == self._candidate
            self._plan = found if confirmed else None
            self._candidate = found
            self._narrow_passes = 0
        elif done.matches_plan():
            self._narrow_passes += 1
        else:
            self._plan = None

    # -- measurement ------------------------------------------------------------------------------

    def _measure(self) -> None:
        """Keep the sites of the finished measured step (and its probe statistics) for the
        next flush; flush once ``flush_every`` measurements wait."""
        done = self.capture.take()
        self._follow(done)
        if not done.calls:
            if self.measurements == 0:
                raise NoSiteError(self._no_site_message(done.skipped))
            return
        calls = done.calls
        probe: list[Stats] = [{} for _ in calls]
        if self.probe is not None:
            self.capture.disarm()
            self.capture.slot = None
            self.capture.arm()
            probed = {c.name: c for c in self._run_probe()}
            self.capture.disarm()
            with untraced():
                self._probe_into(calls, probe, probed)
        self._pending.append(_Measured(self.step_index, calls, probe))
        self.measurements += 1
        cloned = self.capture.slots.cloned
        if len(self._pending) >= self.flush_every or cloned >= self.flush_bytes:
            self._flush()

    def _flush(self, across_ranks: bool = True) -> None:
        """Compute, reduce and write every buffered measurement, in step order."""
        pending, self._pending = self._pending, []
        self.capture.slots.cloned = 0
        if not pending:
            return
        calls = [c for m in pending for c in m.calls]
        probes = [p for m in pending for p in m.probe]
        with untraced():
            groups = group_stats(calls)
            for g in groups:
                _add_probe(g, probes)
            stats = reduce_stats([g.stats for g in groups], across_ranks)
            values = self._values(groups, stats, len(calls))
        out: list[Record] = []
        i = 0
        for m in pending:
            records = []
            for call in m.calls:
                records.append(self._record(m.step, call, values[i]))
                i += 1
            out += records + [a for r in records for a in self._alarms(r)]
        for sink in self.sinks:
            sink.write(out)

    def _values(self, groups: list[Group], stats: list[Stats], n: int) -> list[dict[str, Any]]:
        """The metrics of every call as Python numbers (one ``tolist`` for all of them).

        Keys starting with ``_`` are the statistics that decide which metrics are missing."""
        layouts, parts = [], []
        for g, s in zip(groups, stats, strict=True):
            if g.kind == "responsibility":
                metrics = finish_responsibility(s, self.thresholds.dead_fraction)
            else:
                metrics = finish_attention(s)
            if self.probe is not None:
                metrics |= finish_probe(s)
            for flag in _FLAGS:
                if flag in s:
                    metrics["_" + flag] = s[flag]
            rows = len(g.index)
            cols = [t.reshape(rows, -1).double() for t in metrics.values()]
            widths = [
                (key, c.shape[1], t.dim() > 1)
                for (key, t), c in zip(metrics.items(), cols, strict=True)
            ]
            layouts.append(widths)
            parts.append(torch.cat(cols, 1).reshape(-1))
        flat = torch.cat(parts).tolist()
        values: list[dict[str, Any]] = [{} for _ in range(n)]
        offset = 0
        for g, widths in zip(groups, layouts, strict=True):
            for i in g.index:
                row = values[i]
                for key, width, vector in widths:
                    row[key] = flat[offset : offset + width] if vector else flat[offset]
                    offset += width
        return values

    def _no_site_message(self, skipped: set[str]) -> str:
        where = "the traced code" if self.model is None else type(self.model).__name__
        n = len(self.capture.names)
        lines = [f"no traceable site in {where} ({n} modules) at step {self.step_index}."]
        if self.capture.seen:
            lines.append(
                f"Sites found but not selected by sites={self.patterns}: {sorted(self.capture.seen)}"
            )
        else:
            lines.append("Searched for: " + "; ".join(SEARCHED) + ".")
            lines.append(
                "Run the forward pass (and the loss) inside the `with Tracer(...)` block; "
                "attention must be one of the forms above."
            )
        return "\n".join(lines)

    def _run_probe(self) -> list[ResponsibilityCall | AttentionCall]:
        model = self.model
        modules = [] if model is None else list(model.modules())
        modes = [m.training for m in modules]
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
            for m, mode in zip(modules, modes, strict=True):
                m.training = mode
        return self.capture.take().calls

    def _probe_into(self, calls: list, stats: list[Stats], probed: dict[str, Any]) -> None:
        """Churn / drift statistics of the probe batch for the matching training sites (into
        ``stats``, one dict per site)."""
        for call, s in zip(calls, stats, strict=True):
            p = probed.get(call.name)
            prev = self._previous.get(call.name)
            if isinstance(call, ResponsibilityCall):
                zero = {"churn_changed": torch.zeros(()), "churn_n": torch.zeros(())}
                if isinstance(p, ResponsibilityCall):
                    now = p.assignment()
                    ok = prev is not None and prev["assignment"].shape == now.shape
                    s.update(churn_stats(now, prev["assignment"]) if ok else zero)
                    self._previous[call.name] = {"assignment": now}
                else:
                    s.update(zero)
            else:
                zero = {"drift_tv": torch.zeros(()), "drift_rows": torch.zeros(())}
                zero |= {"value_diff_sq": torch.zeros(()), "value_prev_sq": torch.zeros(())}
                if isinstance(p, AttentionCall):
                    alpha, v = p.weights().float(), p.values()
                    v = None if v is None else v.float()
                    ok = prev is not None and prev["alpha"].shape == alpha.shape
                    if (
                        ok
                        and v is not None
                        and prev["v"] is not None
                        and prev["v"].shape == v.shape
                    ):
                        s.update(drift_stats(alpha, prev["alpha"], v, prev["v"]))
                    elif ok:
                        s.update(drift_stats(alpha, prev["alpha"], None, None))
                        s.update(value_diff_sq=torch.zeros(()), value_prev_sq=torch.zeros(()))
                    else:
                        s.update(zero)
                    self._previous[call.name] = {"alpha": alpha, "v": v}
                else:
                    s.update(zero)

    def _record(self, step: int, call: ResponsibilityCall | AttentionCall, v: dict) -> Record:
        """The record of one site at one step from its metrics ``v`` (Python numbers)."""
        if isinstance(call, ResponsibilityCall):
            kind = call.kind
            has_grad = v["_n_grad"] > 0
        else:
            kind = "attention"
            has_grad = v.get("_n_grad", 0.0) > 0
        if self.probe is not None:
            for metric, flag in _PROBE_FLAGS:
                if metric in v and not v[flag] > 0:
                    v[metric] = None
        record: Record = {"kind": "site", "step": step, "site": call.name, "type": kind}
        record.update(v)
        for key in _PRIVATE:
            record.pop(key, None)
        if kind == "attention":
            for key in ("alpha_residual", "nonfinite", *_GRADIENT_METRICS[kind]):
                record.setdefault(key, None)
        else:
            record["K"] = len(record["mass"])
            record["source"] = "gradient" if has_grad else "forward"
            if record["K"] > self.max_components:
                record["mass"] = None
        missing = [m for m in _GRADIENT_METRICS[kind] if not has_grad or record.get(m) is None]
        missing += [
            m
            for m in ("churn", "attention_drift", "value_drift")
            if m in record and record[m] is None
        ]
        for m in missing:
            record[m] = None
        record["missing"] = sorted(set(missing))
        return record

    def _alarms(self, record: Record) -> list[Record]:
        site, t = record["site"], self.thresholds
        checks: list[tuple[str, float, float, bool, str]] = []
        if record.get("nonfinite"):
            checks.append(
                (
                    "nonfinite_gradient",
                    record["nonfinite"],
                    0.0,
                    True,
                    "non-finite gradient entries excluded from the metrics",
                )
            )
        if record["type"] != "attention" and record["K"] > 1 and record["rows"] > 0:
            checks.append(
                (
                    "dominance",
                    record["dominance"],
                    t.dominance,
                    record["dominance"] > t.dominance,
                    "one component holds most of the mass",
                )
            )
            checks.append(
                (
                    "effective_k",
                    record["effective_k"],
                    t.effective_k,
                    record["effective_k"] < t.effective_k,
                    "effective number of components collapsed",
                )
            )
            checks.append(
                (
                    "dead_components",
                    record["dead"],
                    0.0,
                    record["dead"] > 0,
                    "components with (almost) no responsibility",
                )
            )
            scale = record["scale"]
            first = self._first_scale.setdefault(site, scale)
            if math.isfinite(scale) and first > 0:
                checks.append(
                    (
                        "shrinking_scale",
                        scale,
                        t.scale_ratio * first,
                        scale < t.scale_ratio * first,
                        "the distance scale is shrinking",
                    )
                )
        alarms = []
        for name, value, threshold, fired, text in checks:
            if not fired:
                continue
            message = f"{site}: {text} ({name}={value:.4g}, threshold {threshold:.4g}) at step {record['step']}"
            alarms.append(
                {
                    "kind": "alarm",
                    "step": record["step"],
                    "site": site,
                    "alarm": name,
                    "value": value,
                    "threshold": threshold,
                    "message": message,
                }
            )
            if (site, name) not in self._warned:
                self._warned.add((site, name))
                logger.warning(message)
                warnings.warn(message, CollapseWarning, stacklevel=5)
        return alarms


_PROBE_FLAGS = (
    ("churn", "_churn_n"),
    ("attention_drift", "_drift_rows"),
    ("value_drift", "_value_prev_sq"),
)
"""Probe metrics and the statistic that must be positive for them to exist."""


def _add_probe(group: Group, probes: list[Stats]) -> None:
    """Stack the probe statistics of the group's calls into its statistics (leading axis S),
    on the CPU (where the statistics are reduced and finished)."""
    members = [probes[i] for i in group.index]
    for key in members[0]:
        group.stats[key] = torch.stack([p[key].double().cpu() for p in members])

"""`WandbSink`: the tracer's bounded summary as Weights & Biases scalars, its alarms as alerts.

```python
with Tracer(model, sinks=["jsonl:runs/trace.jsonl", "wandb"]) as tracer: ...
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from implicit_em.trace.records import Record
from implicit_em.trace.summary import summarize

__all__ = ["WandbSink"]


class WandbSink:
    """Logs each measured step's summary to a W&B run and raises a W&B alert per alarm.

    Per measured step the keys of `implicit_em.trace.summary.summarize` (p50 / p90 / max of
    each metric per site type, the `top_k` worst sites, `trace/alarms`) are logged together
    with `trace/step`, the tracer's step, which `define_metric` makes their x-axis: the run's
    own step counter is left to the training loop, so the tracer never logs out of order.
    Each alarm becomes an alert (`run.alert`, level `WARN`, titled by alarm and site, the
    alarm's message as text; W&B sends one alert per title and minute at most). In offline
    mode (`WANDB_MODE=offline`) scalars and alerts are stored in the run's files and sent by
    `wandb sync`.

    More keyword arguments go to `wandb.init` when the sink starts a run (e.g. `project`).

    Parameters
    ----------
    run : wandb Run or None, default=None
        The run to log to; `None`: the active run (`wandb.run`), else a new one started with
        `wandb.init(**init)` and finished by `close`.
    top_k : int, default=3
        Worst sites named per site type.

    Raises
    ------
    ImportError
        If wandb is not installed.
    """

    def __init__(self, run: Any = None, top_k: int = 3, **init: Any) -> None:
        try:
            import wandb
        except ImportError as err:
            raise ImportError("the W&B sink needs wandb: pip install 'implicit-em[wandb]'") from err
        self._owned = run is None and wandb.run is None
        self.run = run if run is not None else (wandb.run or wandb.init(**init))
        self.top_k = top_k
        self._alarms: dict[int, list[Record]] = {}
        self.run.define_metric("trace/step")
        self.run.define_metric("trace/*", step_metric="trace/step")

    def write(self, records: Sequence[Record]) -> None:
        """Raise an alert for each alarm at once; log a step's summary with its site records.

        The tracer writes a step's alarms at that step and its site records later, in
        batches: the alarms are kept until their step's site records arrive, so that the
        step is logged once, its `trace/alarms` included."""
        steps: dict[int, list[Record]] = {}
        for r in records:
            if r["kind"] == "alarm":
                self.run.alert(
                    title=f"{r['alarm']} at {r['site']}"[:63], text=r["message"], level="WARN"
                )
                self._alarms.setdefault(r["step"], []).append(r)
            else:
                steps.setdefault(r["step"], []).append(r)
        for step, batch in steps.items():
            batch += self._alarms.pop(step, [])
            self.run.log({"trace/step": step, **summarize(batch, self.top_k)})

    def close(self) -> None:
        """Finish the run if this sink started it."""
        if self._owned:
            self.run.finish()

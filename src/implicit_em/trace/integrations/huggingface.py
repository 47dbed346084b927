"""`TracerCallback`: the tracer in a `transformers.Trainer`, its metrics in the Trainer's logs.

```python
trainer = Trainer(model=model, args=args, train_dataset=train)
trainer.add_callback(TracerCallback(trainer, sinks=["jsonl:runs/trace.jsonl"]))
trainer.train()
```
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback

from implicit_em.trace.integrations.monitor import Monitor, stop_message
from implicit_em.trace.sinks import Sink

__all__ = ["TracerCallback"]

logger = logging.getLogger("implicit_em.trace")


class TracerCallback(TrainerCallback):
    """Traces a `transformers.Trainer`'s training and logs a bounded summary through it.

    Every `every`-th optimizer step (those whose global step is a multiple of `every`) is
    measured, over all micro-batches of the step under gradient accumulation (one record per
    site and optimizer step). The summary of the step (`implicit_em.trace.summary`: p50 / p90
    / max of each metric per site type, the `top_k` worst sites, the number of alarms) is
    logged with `trainer.log`, so it reaches `trainer.state.log_history` and every logger that
    `report_to` names; the full records go to `sinks`. Evaluation and everything else the
    Trainer runs between optimizer steps is not traced. Alarms are logged as warnings on the
    `implicit_em.trace` logger (and `CollapseWarning`) and, with `stop_on_alarm`, stop the
    training after the step (`control.should_training_stop`). Under DDP (`accelerate launch`,
    `torchrun`) every rank traces its shard and the metrics are those of the global batch.

    More keyword arguments go to `Tracer` (`sites`, `probe`, `thresholds`, `max_rows`, ...).

    Parameters
    ----------
    trainer : transformers.Trainer
        The Trainer to log through (`trainer.log`).
    every : int or None, default=None
        Measure every `every`-th optimizer step; `None` follows `args.logging_steps` (a
        fraction of the run when below 1, as the Trainer reads it).
    top_k : int, default=3
        Worst sites named per site type in the logs.
    stop_on_alarm : bool, default=False
        Stop training after a measured step that raised an alarm.
    sinks : sequence of str or Sink, default=()
        Sinks of the full per-site records, e.g. `"jsonl:runs/trace.jsonl"`, `"wandb"`.

    Attributes
    ----------
    monitor : Monitor or None
        The tracer's driver during training (`monitor.tracer` is the `Tracer`).
    """

    def __init__(
        self,
        trainer: Any,
        every: int | None = None,
        top_k: int = 3,
        stop_on_alarm: bool = False,
        sinks: Sequence[str | Sink] = (),
        **options: Any,
    ) -> None:
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"every must be a positive integer or None, got {every!r}")
        self.trainer = trainer
        self.every = every
        self.top_k = top_k
        self.stop_on_alarm = stop_on_alarm
        self.sinks = list(sinks)
        self.options = options
        self.monitor: Monitor | None = None

    def _every(self, args: Any, state: Any) -> int:
        if self.every is not None:
            return self.every
        steps = args.logging_steps
        if steps < 1:
            return max(1, math.ceil(steps * state.max_steps))
        return int(steps)

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any
    ) -> None:
        self.monitor = Monitor(
            model,
            self._every(args, state),
            state.global_step + 1,
            self.top_k,
            self.sinks,
            self.options,
        )

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.resume()

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.micro_batch()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        summary, alarms = self.monitor.end_step()
        if summary:
            # `Trainer.log` clears `should_log`; keep the Trainer's own logging of this step
            should_log = control.should_log
            self.trainer.log(summary)
            control.should_log = should_log
        if alarms and self.stop_on_alarm:
            logger.warning(stop_message(alarms))
            control.should_training_stop = True
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    def close(self) -> None:
        """Write what is buffered and remove the tracer (done at the end of training; call it
        after an exception escaped `trainer.train()`)."""
        if self.monitor is not None:
            monitor, self.monitor = self.monitor, None
            monitor.close()

"""`TracerCallback`: the tracer in a Lightning `Trainer`, its metrics through `log_dict`.

```python
trainer = lightning.Trainer(max_steps=1000, callbacks=[TracerCallback(sinks=["jsonl:trace.jsonl"])])
trainer.fit(module, loader)
```
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from lightning.pytorch import Callback

from implicit_em.trace.integrations.monitor import Monitor, stop_message
from implicit_em.trace.sinks import Sink

__all__ = ["TracerCallback"]

logger = logging.getLogger("implicit_em.trace")


class TracerCallback(Callback):
    """Traces a Lightning `Trainer`'s training and logs a bounded summary with `log_dict`.

    Every `every`-th optimizer step (those whose global step, counted from 1, is a multiple
    of `every`) is measured, over all its micro-batches under `accumulate_grad_batches` (one
    record per site and optimizer step). The summary of the step
    (`implicit_em.trace.summary`) is logged with the module's `log_dict` (`on_step=True`),
    so it reaches the Trainer's loggers at the steps they write; the full records go to
    `sinks`. Validation and everything else between optimizer steps is not traced. Alarms
    are logged as warnings on the `implicit_em.trace` logger (and `CollapseWarning`) and, with
    `stop_on_alarm`, stop training (`trainer.should_stop`). Under DDP every rank traces its
    shard and the metrics are those of the global batch.

    More keyword arguments go to `Tracer` (`sites`, `probe`, `thresholds`, `max_rows`, ...).

    Parameters
    ----------
    every : int or None, default=None
        Measure every `every`-th optimizer step; `None` follows the Trainer's
        `log_every_n_steps`.
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
        every: int | None = None,
        top_k: int = 3,
        stop_on_alarm: bool = False,
        sinks: Sequence[str | Sink] = (),
        **options: Any,
    ) -> None:
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"every must be a positive integer or None, got {every!r}")
        self.every = every
        self.top_k = top_k
        self.stop_on_alarm = stop_on_alarm
        self.sinks = list(sinks)
        self.options = options
        self.monitor: Monitor | None = None
        self._stepped = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        every = self.every if self.every is not None else max(1, trainer.log_every_n_steps)
        self.monitor = Monitor(
            pl_module,
            every,
            trainer.global_step + 1,
            self.top_k,
            self.sinks,
            self.options,
            through_optimizer_step=True,
        )

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self.monitor.resume()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._stepped = True

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._stepped:
            self.monitor.micro_batch()
            return
        self._stepped = False
        summary, alarms = self.monitor.end_step()
        if summary:
            pl_module.log_dict(summary, on_step=True, on_epoch=False)
        if alarms and self.stop_on_alarm:
            logger.warning(stop_message(alarms))
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.close()

    def close(self) -> None:
        """Write what is buffered and remove the tracer (done when training ends or raises)."""
        if self.monitor is not None:
            monitor, self.monitor = self.monitor, None
            monitor.close()

"""Where measurements go: memory (`History`), JSON Lines, TensorBoard, W&B (`WandbSink`).

A record is a flat dict. Site records have `kind="site"`, `step`, `site`, `type` and
their metrics (`None` for a metric that is missing, listed in `missing`); alarm records have
`kind="alarm"`, `step`, `site`, `alarm`, `value`, `threshold` and `message`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from implicit_em.trace.records import Record

__all__ = ["History", "JSONLSink", "MemorySink", "Sink", "TensorBoardSink", "make_sink"]


class Sink(Protocol):
    """Receives alarm records at their step, site records in step order a batch of measured
    steps at a time (`flush_every`)."""

    def write(self, records: Sequence[Record]) -> None: ...

    def close(self) -> None: ...


class History:
    """The records of a traced run, in order: per-step, per-site metrics and alarms.

    A sequence of records (`len`, iteration, indexing); `Tracer.history` is one, and
    `from_jsonl` reads one back from a file. The fields of each record type are listed in
    `implicit_em.trace.records`.

    Parameters
    ----------
    records : iterable of dict, default=()
        The records, in the order they were written.

    Attributes
    ----------
    records : list of dict
        The records.
    """

    def __init__(self, records: Iterable[Record] = ()) -> None:
        self.records: list[Record] = list(records)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> History:
        """Read a JSON Lines file written by `JSONLSink` (a truncated last line is skipped).

        Parameters
        ----------
        path : str or Path
            The file (`Tracer(sinks=["jsonl:PATH"])`).

        Returns
        -------
        History
            Its records, in file order.
        """
        records = []
        for line in Path(path).read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return cls(records)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __getitem__(self, index: int) -> Record:
        return self.records[index]

    def sites(self, kind: str | None = None) -> list[str]:
        """Names of the sites with records, sorted.

        Parameters
        ----------
        kind : str or None, default=None
            Only the sites of this `type` (`"classification"`, `"mixture"` or
            `"attention"`); `None` for all.

        Returns
        -------
        list of str
            The site names.
        """
        names = {
            r["site"]
            for r in self.records
            if r["kind"] == "site" and (kind is None or r["type"] == kind)
        }
        return sorted(names)

    def alarms(self) -> list[Record]:
        """The alarm records (`kind == "alarm"`), in order."""
        return [r for r in self.records if r["kind"] == "alarm"]

    def series(self, site: str, metric: str) -> tuple[list[int], list[Any]]:
        """Steps and values of one metric at one site, skipping measurements where it is missing.

        Parameters
        ----------
        site : str
            The site's name.
        metric : str
            A field of its records, e.g. `"effective_k"` or `"attention_drift"`.

        Returns
        -------
        steps : list of int
            The measured steps at which the metric is not `None`.
        values : list
            The metric at those steps.
        """
        steps, values = [], []
        for r in self.records:
            if r["kind"] == "site" and r["site"] == site and r.get(metric) is not None:
                steps.append(r["step"])
                values.append(r[metric])
        return steps, values

    def last(self, site: str) -> Record:
        """The latest record of a site.

        Parameters
        ----------
        site : str
            The site's name.

        Returns
        -------
        dict
            Its last site record.

        Raises
        ------
        KeyError
            If the site has no record (the message lists the sites that have).
        """
        for r in reversed(self.records):
            if r["kind"] == "site" and r["site"] == site:
                return r
        raise KeyError(f"no record of site {site!r}; sites: {self.sites()}")

    def to_pandas(self) -> Any:
        """A `pandas.DataFrame` with one row per record (requires pandas).

        Returns
        -------
        pandas.DataFrame
            One column per record field (site and alarm fields side by side, missing ones as
            NaN/None).

        Raises
        ------
        ImportError
            If pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError as err:
            raise ImportError("History.to_pandas() needs pandas: pip install pandas") from err
        return pd.DataFrame.from_records(self.records)


class MemorySink:
    """Keeps every record in `history` (about 1 KB per site per measurement).

    Attributes
    ----------
    history : History
        The records written so far.
    """

    def __init__(self) -> None:
        self.history = History()

    def write(self, records: Sequence[Record]) -> None:
        self.history.records.extend(records)

    def close(self) -> None:
        return None


class JSONLSink:
    """Appends one JSON object per record and flushes after each write (a batch of measured
    steps), so a killed run keeps everything written before it.

    Parameters
    ----------
    path : str or Path
        The file, opened for appending (its folder is created); `History.from_jsonl` reads
        it back.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, records: Sequence[Record]) -> None:
        self._file.write("".join(json.dumps(r) + "\n" for r in records))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardSink:
    """Scalars `site/metric` and a histogram `site/mass` of responsibility mass per
    measurement, through `torch.utils.tensorboard` (requires the tensorboard package).

    Alarms are written as scalars `site/alarm/NAME` (their measured value).

    Parameters
    ----------
    logdir : str or Path
        The TensorBoard log folder.

    Raises
    ------
    ImportError
        If tensorboard is not installed.
    """

    def __init__(self, logdir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(
                "the TensorBoard sink needs tensorboard: pip install tensorboard"
            ) from err
        self.logdir = Path(logdir)
        self._writer = SummaryWriter(log_dir=str(self.logdir))

    def write(self, records: Sequence[Record]) -> None:
        import numpy as np

        for r in records:
            step = r["step"]
            if r["kind"] == "alarm":
                self._writer.add_scalar(f"{r['site']}/alarm/{r['alarm']}", float(r["value"]), step)
                continue
            for key, value in r.items():
                if key in ("step",) or isinstance(value, bool):
                    continue
                if isinstance(value, int | float):
                    self._writer.add_scalar(f"{r['site']}/{key}", value, step)
            if r.get("mass"):
                self._writer.add_histogram(f"{r['site']}/mass", np.asarray(r["mass"]), step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def make_sink(spec: str | Sink) -> Sink:
    """The sink named by `spec`.

    Parameters
    ----------
    spec : str or Sink
        `"memory"`, `"jsonl:PATH"`, `"tensorboard:LOGDIR"`, `"wandb"` (the active W&B run,
        else a new one) or `"wandb:PROJECT"` (a new run in that project when none is active),
        or a sink object (returned as it is).

    Returns
    -------
    Sink
        A `MemorySink`, `JSONLSink`, `TensorBoardSink` or `WandbSink`, or `spec` itself.

    Raises
    ------
    ValueError
        If `spec` is a string of none of these forms.
    """
    if not isinstance(spec, str):
        return spec
    kind, _, target = spec.partition(":")
    if kind == "memory" and not target:
        return MemorySink()
    if kind == "jsonl" and target:
        return JSONLSink(target)
    if kind == "tensorboard" and target:
        return TensorBoardSink(target)
    if kind == "wandb":
        from implicit_em.trace.integrations.wandb_sink import WandbSink

        return WandbSink(**({"project": target} if target else {}))
    raise ValueError(
        f"unknown sink {spec!r}; use 'memory', 'jsonl:PATH', 'tensorboard:LOGDIR', "
        "'wandb[:PROJECT]' or a Sink object"
    )

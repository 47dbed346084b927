"""The wind tunnel's side-by-side table: each of our figures beside the reference's figure for
the same quantity on the same kind of data, with both budgets, read from a report's E10 entry.

The reference's figures (`REFERENCE`) are held-out except one: on the bijection its mean
absolute entropy error, 0.007 bits, is read on a validation set of fresh sequences (6 x 192,
100k steps at batch 128), and its MLP's 1.85 bits is the context-free floor of keys drawn with
replacement. On the HMM its 7.5e-5 is a KL on 200 sequences drawn with the seed of its
training set, which regenerates its training sequences: a training-set figure, with no held-out
counterpart of ours (every one of our figures is on fresh sequences). Its held-out counterparts
are an entropy error of about 0.049 bits (its own figure script) and a KL of about 0.012 (its
K = 30 figure on fresh data), for 9 x 256 trained 50 epochs on 10k sequences (7,850 x 64).

Our figures come from E10's reference-budget arms when the report ran them (its table whose
first column is `arm`), else from its 10-seed table at the cheaper budget; each row says which,
with the steps x batch, the model, the hours per seed where recorded, and plainly whether our
mean reaches the reference's figure (`reached`), or by what factor it does not. When the report's
tasks are not the reference's (`REFERENCE_TASKS`), there is nothing to put side by side, and the
block says so, naming the sizes that ran.

`docs/windtunnel.md` carries the block between two marker lines; `python -m
implicit_em.report.rendering.reference_table PAGE RESULTS` writes it there, and a test keeps the
page in step with `results/full/`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from implicit_em.report.rendering.marked import between, rewrite_block

__all__ = ["BEGIN", "END", "REFERENCE", "REFERENCE_TASKS", "reference_table", "with_table"]

BEGIN = "<!-- reference table: written from results/full/results.json -->"
END = "<!-- end of reference table -->"

REFERENCE_TASKS: dict[str, dict[str, Any]] = {
    "bijection": {"n_symbols": 20, "n_pairs": 19, "replacement": False},
    "hmm": {"n_states": 5, "n_observations": 5, "length": 20, "levels": 100, "floor": 5},
    "dice": {"n_faces": 6, "length": 64},
}
"""The reference's task sizes, as the 10-seed size names them (the arms add the HMM's markers)."""


@dataclass(frozen=True)
class Figure:
    """One of the reference's figures: the row it sits beside (`task`, `model` as E10's tables
    name them, our `arm`), the quantity (`entropy` error or `KL`, bits per position), its
    `value` (None: not reported), the `data` it was read on, and the reference's `budget`."""

    task: str
    model: str
    arm: str
    quantity: str
    value: float | None
    data: str
    budget: str


_BIJECTION = "6 × 192, 100k × 128"
_HMM = "9 × 256, 7,850 × 64 (50 epochs of 10k)"
REFERENCE: tuple[Figure, ...] = (
    Figure("bijection", "transformer", "bijection-2x64", "entropy", 0.007, "held-out", _BIJECTION),
    Figure("bijection", "transformer", "bijection-4x128", "entropy", 0.007, "held-out", _BIJECTION),
    Figure(
        "bijection", "prefix MLP", "bijection-prefix", "entropy", None, "—", "not in the reference"
    ),
    Figure(
        "bijection",
        "position-wise MLP",
        "bijection-pos",
        "entropy",
        1.85,
        "held-out; keys drawn with replacement, whose floor it is",
        _BIJECTION,
    ),
    Figure("HMM filter", "transformer", "hmm-4x128", "entropy", 0.049, "held-out", _HMM),
    Figure("HMM filter", "transformer", "hmm-4x128", "KL", 0.012, "held-out", _HMM),
    Figure("HMM filter", "transformer", "hmm-4x128", "KL", 7.5e-5, "training set", _HMM),
    Figure("HMM filter", "prefix MLP", "hmm-prefix", "entropy", None, "—", "not in the reference"),
)
"""The reference's figures set beside ours, one row each."""

_COLUMNS = (
    "task",
    "model",
    "quantity (bits)",
    "reference (data; model, steps × batch)",
    "ours, held-out (source; model, steps × batch, hours per seed)",
    "reached?",
)


def _mean(cell: Any) -> float:
    """The mean of an `estimate [low, high]` cell."""
    return float(str(cell).split()[0])


def _reached(ours: float, figure: Figure) -> str:
    if figure.value is None:
        return "—"
    if figure.data == "training set":
        return "not comparable (a training-set figure)"
    if "with replacement" in figure.data:
        return "not comparable (another task: keys drawn with replacement, floor 1.849)"
    if ours <= figure.value:
        return "reached"
    return f"not reached ({ours / figure.value:.3g}× the reference's)"


def _ours(entry: Mapping[str, Any], figure: Figure) -> tuple[str, float] | None:
    """Our cell for `figure` and its mean: from the arm's row, else the 10-seed table's."""
    tables = entry.get("tables") or []
    arms = next((t for t in tables if t["columns"] and t["columns"][0] == "arm"), None)
    key = "entropy MAE (bits)" if figure.quantity == "entropy" else "KL (bits)"
    if arms is not None:
        col = {name: i for i, name in enumerate(arms["columns"])}
        row = next((r for r in arms["rows"] if r[0] == figure.arm), None)
        if row is not None:
            where = (
                f"reference-budget arm {figure.arm}; {row[col['layers × width']]}, "
                f"{row[col['steps × batch']]}, {row[col['hours per seed']]} h"
            )
            return f"{row[col[key]]} ({where})", _mean(row[col[key]])
    if figure.arm == "bijection-4x128" or not tables:
        return None
    table = tables[0]
    col = {name: i for i, name in enumerate(table["columns"])}
    row = next(
        (
            r
            for r in table["rows"]
            if (r[col["task"]], r[col["model"]]) == (figure.task, figure.model)
        ),
        None,
    )
    if row is None:
        return None
    train = (entry.get("config") or {}).get("train", {})
    where = (
        f"10-seed size; {train.get('n_layer', '?')} × {train.get('n_embd', '?')}, "
        f"{row[col['steps']]:,} × {train.get('batch_size', '?')}"
    )
    return f"{row[col[key]]} ({where})", _mean(row[col[key]])


def reference_table(document: Mapping[str, Any]) -> str:
    """The block for a report `document`: the side-by-side table, or why there is none."""
    entry = next((e for e in document.get("experiments", []) if e["id"] == "E10"), None)
    if entry is None or not entry.get("tables"):
        return "The published full run has no E10 measurements to set beside the reference's."
    config = entry.get("config") or {}
    tasks = config.get("tasks") or {}
    if tasks != REFERENCE_TASKS:
        sizes = "; ".join(
            f"{task} " + ", ".join(f"{k} = {v}" for k, v in params.items())
            for task, params in tasks.items()
        )
        return (
            "The published full run's wind tunnel did not run the reference's task sizes "
            f"(it ran: {sizes or 'sizes not recorded'}), so it has nothing to set beside the "
            "reference's numbers; the development runs above are the comparison on the same tasks."
        )
    meta = document.get("meta", {})
    arms = any(t["columns"] and t["columns"][0] == "arm" for t in entry["tables"])
    lines = [
        f"From the {meta.get('size', '?')}-size report of {meta.get('date', '?')} (E10; mean "
        "and 95% interval over seeds, every figure of ours on fresh held-out sequences), each "
        "beside the reference's figure for the same quantity, with the data it was read on "
        "and both budgets. "
        + (
            "Ours come from the reference-budget arms."
            if arms
            else "This report has no reference-budget arms: ours come from the 10-seed size, "
            "far below the reference's budget."
        ),
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    for figure in REFERENCE:
        found = _ours(entry, figure)
        if found is None:
            continue
        cell, mean = found
        if figure.data == "training set":
            cell = "none: we never read training sequences (held-out KL in the row above)"
        reference = (
            "not reported"
            if figure.value is None
            else f"{figure.value:g} ({figure.data}; {figure.budget})"
        )
        quantity = "entropy error" if figure.quantity == "entropy" else "KL"
        cells = (figure.task, figure.model, quantity, reference, cell, _reached(mean, figure))
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def with_table(text: str, document: Mapping[str, Any]) -> str:
    """`text` with the block between its marker lines replaced by the document's
    (`ValueError` when the markers are missing)."""
    return between(text, BEGIN, END, reference_table(document))


def main(argv: Sequence[str]) -> int:
    """`python -m implicit_em.report.rendering.reference_table PAGE RESULTS`."""
    return rewrite_block(argv, with_table)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The wind tunnel's side-by-side table: the reference's published numbers beside the published
full run's (E10), on the same tasks.

The reference reports the mean absolute error of the predictive entropy, in bits per position,
for a transformer of 6 layers of width 192 trained 100k steps (`PUBLISHED`). The table puts E10's
arms beside it in that metric and in KL to the exact posterior, with their parameters, steps
and convergence, read from the published document alone. When the published run's tasks are not
the reference's (`REFERENCE_TASKS`), there is nothing to put side by side, and the block says
so, naming the sizes that ran.

`docs/windtunnel.md` carries the block between two marker lines; `python -m
implicit_em.report.rendering.reference_table PAGE RESULTS` writes it there, and a test keeps the
page in step with `results/full/`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.rendering.marked import between, rewrite_block

__all__ = ["BEGIN", "END", "PUBLISHED", "REFERENCE_TASKS", "reference_table", "with_table"]

BEGIN = "<!-- reference table: written from results/full/results.json -->"
END = "<!-- end of reference table -->"

REFERENCE_TASKS: dict[str, dict[str, Any]] = {
    "bijection": {"n_symbols": 20, "n_pairs": 19, "replacement": False},
    "hmm": {"n_states": 5, "n_observations": 5, "length": 20, "levels": 100, "floor": 5},
    "dice": {"n_faces": 6, "length": 64},
}
"""The reference's task sizes, as the wind tunnel's configurations name them."""

PUBLISHED: dict[tuple[str, str], str] = {
    ("bijection", "transformer"): "0.007",
    ("bijection", "position-wise MLP"): "1.85",
    ("HMM filter", "transformer"): "about 7.5e-5",
}
"""The reference's mean absolute entropy error (bits) by (task, model) as E10's table names
them; the other cells are not among its published numbers."""

_COLUMNS = ("task", "model", "parameters", "KL (bits)", "entropy MAE (bits)", "steps")


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
            f"(it ran: {sizes or 'sizes not recorded'}), so it has nothing to set beside the reference's numbers; the "
            "development runs above are the comparison on the same tasks."
        )
    table = entry["tables"][0]
    at = {name: table["columns"].index(name) for name in _COLUMNS}
    converged = next(i for i, c in enumerate(table["columns"]) if c.startswith("converged"))
    train = config.get("train", {})
    meta = document.get("meta", {})
    seeds = entry.get("seeds") or config.get("seeds") or []
    lines = [
        f"From the {meta.get('size', '?')}-size report of {meta.get('date', '?')} (E10, "
        f"{len(seeds)} seeds, a transformer of {train.get('n_layer', '?')} × "
        f"{train.get('n_embd', '?')}; mean and 95% interval over seeds), beside the reference's "
        "published numbers (6 × 192, 100k steps), in the reference's metric, the mean absolute "
        "error of the predictive entropy (bits per position), and in KL to the exact posterior.",
        "",
        "| task | model | reference: entropy error | ours: entropy error | ours: KL | "
        "parameters | steps | converged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table["rows"]:
        task, model = row[at["task"]], row[at["model"]]
        cells: Sequence[Any] = (
            task,
            model,
            PUBLISHED.get((task, model), "not reported"),
            row[at["entropy MAE (bits)"]],
            row[at["KL (bits)"]],
            f"{row[at['parameters']]:,}",
            row[at["steps"]],
            row[converged],
        )
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

r"""Robustness: an item's verdict under each of its registered alternatives.

Each alternative (`registry.Alternative`) is a view of the same document, read by the same rule
(`readings.item_reading`):

* `criteria`: the named parts read from other criteria (another measure of the same quantity,
  one task alone);
* `threshold`: one criterion judged on its own samples at another threshold (the first-stated
  one), with its interval method;
* `measure`: a part read from a point estimate, the mean of some of the experiment's `numbers`,
  against a threshold (a first-stated measure whose per-seed values were not kept); it has no
  interval and ran no controls, and says so;
* `dataset`: every criterion of the item that has samples `<number><suffix>` (such as
  `gd_path_gap@wine`) judged on those alone; criteria without them are read as they are. It is
  `available` only when at least one criterion has such samples.

A criterion read again on other values or at another threshold (`rejudged`) is read by the
function that read it first (`Criterion.evaluation`): its interval method, its declared bounds,
and degeneracy (a data set whose seeds all agree is a gate there too, casting no vote).

An item whose verdict under an available alternative differs from its verdict is **fragile**,
and the alternatives that flip it are named, but only a **sound** alternative may flip it: one
that passes the same controls as the primary (`registry.ALTERNATIVE_READINGS`; a `measure` is
never sound), and never an item decided by algebra or by reading (`forms.may_flip`). One that
is by construction, uncontrolled, without a working negative control or testing another
mechanism is shown with its verdict and its kind, and flips nothing; so is a restriction of the
primary's own evidence (`restricts`: one data set alone, or a part read from some of its own
criteria), which cannot undo a counterexample or an instance found in what it drops. An
alternative under which nothing votes (`not tested`: its measures hold by construction or lack a realistic negative
control) offers no other reading and flips nothing either.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from implicit_em.report.items.forms import may_flip
from implicit_em.report.items.registry import Alternative, Item, Ref
from implicit_em.report.items.votes import Index, item_reading
from implicit_em.report.judging.rule import OPERATORS, Criterion

__all__ = ["NOT_TESTED", "alternative_readings", "rejudged", "restricts"]

NOT_TESTED = "not tested"
"""An alternative under which nothing votes flips nothing: it offers no reading to flip to."""

Experiments = Mapping[str, Mapping[str, Any]]


def rejudged(
    c: Mapping[str, Any], values: Sequence[float], threshold: float | None = None
) -> dict[str, Any]:
    """The results.json criterion `c` judged again on `values` (its own samples, or one data
    set's) at `threshold` (its own when None), by the function that judged it first
    (`Criterion.evaluation`): its interval method, declared bounds and degeneracy reading.
    Its item marks and controls are kept."""
    criterion = Criterion.from_record(c, threshold)
    return {**c, **criterion.evaluation({"": [float(v) for v in values]}).as_dict()}


def _with_parts(item: Item, parts: Mapping[str, tuple[Ref, ...]]) -> Item:
    new = tuple(
        dataclasses.replace(p, criteria=parts[p.id]) if p.id in parts else p for p in item.parts
    )
    return dataclasses.replace(item, parts=new)


def _measure(alt: Alternative, experiments: Experiments) -> tuple[Ref, dict] | None:
    numbers = experiments.get(alt.experiment, {}).get("numbers", {})
    values = [numbers.get(k) for k in alt.mean_of]
    if not values or not all(isinstance(v, (int, float)) for v in values):
        return None
    estimate = float(sum(values)) / len(values)
    if not math.isfinite(estimate):
        return None
    met = OPERATORS[alt.op](estimate, alt.threshold)
    name = alt.mean_of[0] if len(alt.mean_of) == 1 else f"mean({', '.join(alt.mean_of)})"
    c = {
        "number": name,
        "estimate": estimate,
        "low": estimate,
        "high": estimate,
        "op": alt.op,
        "threshold": alt.threshold,
        "status": "met" if met else "not met",
        "direction": "supports",
        "alternative": "a point estimate from the experiment's numbers: no interval, no controls",
    }
    return Ref(alt.experiment, name), c


def _dataset(item: Item, alt: Alternative, index: Index, experiments: Experiments) -> dict | None:
    changed = {}
    for part in item.parts:
        for ref in part.criteria:
            c = index.get(ref.key)
            samples = experiments.get(ref.experiment, {}).get("samples", {})
            values = samples.get(ref.number + alt.suffix)
            if c is not None and values:
                changed[ref.key] = rejudged(c, values)
    return {**index, **changed} if changed else None


def _view(
    item: Item, alt: Alternative, index: Index, experiments: Experiments
) -> tuple[Item, Index] | None:
    """The item and criteria as the alternative reads them, or None when it is not available
    in this document."""
    if alt.kind == "criteria":
        return _with_parts(item, dict(alt.parts or {})), index
    if alt.kind == "threshold":
        ref = alt.criterion
        c = None if ref is None else index.get(ref.key)
        if ref is None or c is None:
            return None
        values = experiments.get(ref.experiment, {}).get("samples", {}).get(ref.number)
        return (item, {**index, ref.key: rejudged(c, values, alt.threshold)}) if values else None
    if alt.kind == "measure":
        found = _measure(alt, experiments)
        if found is None:
            return None
        ref, c = found
        return _with_parts(item, {alt.part: (ref,)}), {**index, ref.key: c}
    changed = _dataset(item, alt, index, experiments)
    return None if changed is None else (item, changed)


def restricts(item: Item, alt: Alternative) -> bool:
    """Whether `alt` only drops some of the primary's own evidence: one data set alone, or each
    part it names read from some of that part's own criteria (no other measure, threshold or
    criterion)."""
    if alt.kind == "dataset":
        return True
    if alt.kind != "criteria" or not alt.parts:
        return False
    own = {p.id: {r.key for r in p.criteria} for p in item.parts}
    return all({r.key for r in refs} <= own.get(part, set()) for part, refs in alt.parts.items())


def alternative_readings(
    item: Item, index: Index, experiments: Experiments, verdict: str
) -> list[dict[str, Any]]:
    """Each alternative of `item`: its id, kind, `reading` (sound or why not), what it `says`,
    whether it is `available` in this document, the item's `verdict` under it, whether that
    verdict `differs` from `verdict`, and whether it `flips` it (it differs and the alternative
    may flip: `forms.may_flip`)."""
    out = []
    for alt in item.alternatives:
        view = _view(item, alt, index, experiments)
        under = None if view is None else item_reading(view[0], view[1], experiments)
        differs = under is not None and under["verdict"] not in (verdict, NOT_TESTED)
        out.append(
            {
                "id": alt.id,
                "kind": alt.kind,
                "reading": alt.reading,
                "says": alt.says,
                "available": under is not None,
                "verdict": None if under is None else under["verdict"],
                "qualifier": None if under is None else under["qualifier"],
                "differs": differs,
                "flips": differs and may_flip(item.form, alt.reading, restricts(item, alt)),
            }
        )
    return out

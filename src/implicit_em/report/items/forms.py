r"""The logical form of an item's sentence, and what evidence can decide it: in one place.

Each item of the registry states the form of its quoted sentence (`items.json` `form`, with
`form_why`: the words that decide it). The form fixes how the votes of a part's criteria
combine (`part_vote`) and how the parts combine into the item's reading (`combine`), and which
alternatives may flip the verdict (`may_flip`). A vote is a criterion's reading of the item
(`items.votes`): `for`, `against` or `undecided`, cast only by a criterion that counts (its
known-answer controls as planted, a realistic negative control, its rival working on its own
task), so an `against` vote is a *working* counterexample.

With V the votes of a part:

* **identity** (decided by algebra): the parts are read from the gates that verify them; no
  measurement, and no alternative, can flip the verdict (`verified (algebra)`).
* **universal** ("every", "any", a generic statement) and **necessity** ("X is a necessary
  consequence of Y"): a part is `against` when any v ∈ V is `against` (one working
  counterexample refutes it, whatever else agrees), `for` when every v is `for`, else
  `undecided`; the item is `against` as soon as one part is, decided by that part.
* **existential** ("if it *still* reproduces…", "possibly", "could"): a part is `for` when any
  v is `for` (one working instance answers it), `against` when every v is `against`, else
  `undecided`; its parts are the conjuncts of the instance and combine as a conjunction.
* **sufficiency** ("when all three hold, X is inevitable"): read only where all its conditions
  hold; a reading the sentence does not make (each condition's necessity, something else also
  sufficing) is a part *beside* the item, shown as a finding and left out of the verdict.
* **comparative** ("A before B", "A beats B"): a criterion counts only when its rival is shown
  to work (its `baseline` gates declared and passed); parts combine as a conjunction.
* **presentation** (how the paper presents something): decided by reading the text, not by a
  run; the item names why (`not_testable`) and no alternative flips it.

For every form the parts (beside ones excepted) combine by the rule `all` (`readings`) unless a
form above says otherwise; within a part, forms without a rule of their own read `mixed` when
counted criteria disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "COUNTEREXAMPLE_FORMS",
    "FORMS",
    "INSTANCE_FORMS",
    "combine_against",
    "may_flip",
    "needs_rival",
    "part_vote",
]

FORMS = {
    "identity": "an identity, decided by algebra: read from the gates that verify it; no "
    "measurement or alternative can flip it",
    "universal": "a universal statement ('every', 'any', a generic claim): one working "
    "counterexample (a criterion that counts, against it) refutes it, whatever else agrees",
    "necessity": "a necessity ('a necessary consequence of'): one working counterexample (the "
    "effect without what is said to be necessary) refutes it, whatever else agrees",
    "sufficiency": "a sufficiency ('when all hold, X follows'): read only where all its "
    "conditions hold; a reading it does not make (a condition's necessity) is shown beside it",
    "existential": "an existential test ('if it still…', 'possibly', 'could'): one working "
    "instance answers it; it reads against only when every instance measured is against it",
    "comparative": "a comparison ('A before B', 'A beats B'): a criterion counts only once its "
    "rival is shown to work on its own task",
    "presentation": "about the paper's presentation: decided by reading, not by a run",
}
"""The logical forms an item's sentence can take, each with what decides it."""

COUNTEREXAMPLE_FORMS = frozenset({"universal", "necessity"})
"""Forms that one working counterexample refutes."""

INSTANCE_FORMS = frozenset({"existential"})
"""Forms that one working instance answers."""

_FIXED_FORMS = frozenset({"identity", "presentation"})
"""Forms no measured alternative can flip: algebra, or reading the text."""


def part_vote(form: str | None, votes: Sequence[str]) -> str:
    """How one part reads from the votes (`for`, `against`, `undecided`; at least one) of its
    counted criteria under `form` (`mixed` only for forms without a rule of their own)."""
    if form in COUNTEREXAMPLE_FORMS:
        return "against" if "against" in votes else "for" if set(votes) == {"for"} else "undecided"
    if form in INSTANCE_FORMS:
        return "for" if "for" in votes else "against" if set(votes) == {"against"} else "undecided"
    if "for" in votes and "against" in votes:
        return "mixed"
    return "undecided" if "undecided" in votes else votes[0]


def combine_against(form: str | None, parts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The parts that alone decide the item against under `form` (a working counterexample to a
    universal or necessity claim refutes it whatever the other parts read); empty otherwise."""
    if form not in COUNTEREXAMPLE_FORMS:
        return []
    return [p["id"] for p in parts if p["reading"] == "against"]


def needs_rival(form: str | None) -> bool:
    """Whether a criterion of an item of `form` counts only with its rival's own-task gates
    declared (`baseline`): a comparison needs a rival that works."""
    return form == "comparative"


def may_flip(form: str | None, reading: str, restriction: bool = False) -> bool:
    """Whether an alternative whose reading is `reading` (`registry.ALTERNATIVE_READINGS`) may
    flip the verdict of an item of `form`: only a sound reading, never algebra or a reading of
    the text, and never a `restriction` of the primary's own evidence (one data set alone, or a
    part read from some of its own criteria): dropping votes cannot undo a counterexample or an
    instance found among those dropped, so such a reading is shown as a breakdown."""
    return reading == "sound" and form not in _FIXED_FORMS and not restriction

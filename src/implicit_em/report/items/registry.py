r"""The item registry, `protocols/items.json`: how each theory item is split and judged.

Each item (claim, objection or proposed test) is split into the **parts** of its quoted sentence,
each part quoting its words and listing what bears on it:

* `criteria`: references `"E10:bijection_transformer_over_floor"` to registered criteria, or
  `{"ref": ..., "direction": "refutes", "why": ...}` where the item reads a criterion of another
  item the other way (T1's sigmoids matching the posterior refute C11's "necessary");
* `gates`: references `"E1:c1_max_abs_error"` to sanity gates that verify the part by algebra;
* `algebra`: one line, when the part holds by algebra or construction (its criteria then are
  marked `by_construction` and cast no vote): the part reads `verified (algebra)`;
* `untested`: one line, when nothing measures the part;
* `reads` (`for` or `against`) with `read_why`: in an item about the paper's presentation, the
  part is decided by reading the text, and `read_why` quotes what decides it;
* `beside`: one line, for a reading the sentence does not make (C3's necessity of each
  condition, a rival that fails through another mechanism): the part is read and shown as a
  finding beside the item, and left out of its verdict;
* `instance` (existential items only): the name of the instance the part belongs to, when one
  instance must hold several parts at once (C14d: one monitor both detects the collapses and
  keeps quiet where there is none). The item is then read per instance, its parts without an
  instance shared by all (`implicit_em.report.items.votes`).

An item's `form` is the logical form of its sentence (`forms.FORMS`: identity, universal,
necessity, sufficiency, existential, comparative, presentation), with `form_why`, the words that
decide it; the form says what evidence can decide the item (`implicit_em.report.items.forms`).

An item's `rule` says how its parts combine (`RULES`; `implicit_em.report.items.votes`).
`alternatives` are the referee's other reasonable choices (`ALTERNATIVE_KINDS`): other measures
of the same quantity (`criteria`: a part read from other criteria), the first-stated threshold
(`threshold`) or measure (`measure`: a point estimate from the experiment's `numbers`), and each
data set alone (`dataset`: every criterion read from its samples `<number><suffix>`, such as
`gd_path_gap@wine`). Each alternative states its `reading` (`ALTERNATIVE_READINGS`): only a
`sound` one, a reading that passes the same controls as the primary, may flip the verdict; one
`by construction`, `uncontrolled` (a `measure` always is: a point estimate without controls),
`without a working negative control`, testing `another mechanism`, or trained `below the
compared budget` (a model trained far shorter than the result the sentence speaks of) is
shown and flips nothing. `not_testable` makes an item `not tested` whatever is measured, with its
reason. `links` name pairs of items whose verdicts cannot both hold (`contradict`), with the
reason. `registered` is when the rules were fixed and `seen` what had been measured by then: an
item read from measurements started before it is exploratory. An item's own `seen` lists each
measure or criterion of it changed after its data were seen (`date`, what `changed`, what the
first-stated one `first_read`): its verdict is exploratory, and the page says what the
first-stated one read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from implicit_em.report.items.forms import FORMS
from implicit_em.report.rules.protocol import PROTOCOL_DIR

__all__ = [
    "ALTERNATIVE_KINDS",
    "ALTERNATIVE_READINGS",
    "FORMS",
    "ITEMS_FILE",
    "RULES",
    "Alternative",
    "Item",
    "Link",
    "Part",
    "Ref",
    "Registry",
    "Seen",
    "load_registry",
    "registry_from_data",
]

ITEMS_FILE = PROTOCOL_DIR / "items.json"

RULES = {
    "all": (
        "every part is needed: supported when every part is for it (or verified by algebra), "
        "refuted when some part is against it (a false conjunct decides a conjunction), mixed "
        "when a part's own criteria disagree and none is against, else inconclusive when a part "
        "is undecided or untested; not tested when no part casts a vote"
    ),
}
"""How parts combine into an item's verdict, by rule name (the words for an objection:
stands for supported, answered for refuted)."""

ALTERNATIVE_KINDS = ("criteria", "threshold", "measure", "dataset")

ALTERNATIVE_READINGS = (
    "sound",
    "by construction",
    "uncontrolled",
    "without a working negative control",
    "another mechanism",
    "below the compared budget",
)
"""What kind of reading an alternative is: only a `sound` one (it passes the same controls as
the primary) may flip a verdict; the others are shown beside it."""


def _ref_text(experiment: str, number: str) -> str:
    return f"{experiment}:{number}"


@dataclass(frozen=True)
class Ref:
    """A criterion or gate of an experiment, and the direction the item reads it in (None: as
    registered)."""

    experiment: str
    number: str
    direction: str | None = None
    why: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.experiment, self.number)

    @property
    def text(self) -> str:
        return _ref_text(self.experiment, self.number)

    @classmethod
    def parse(cls, data: str | Mapping[str, Any], where: str) -> Ref:
        text, direction, why = (
            (data, None, "")
            if isinstance(data, str)
            else (data.get("ref", ""), data.get("direction"), str(data.get("why", "")))
        )
        experiment, _, number = str(text).partition(":")
        if not experiment.startswith("E") or not number:
            raise ValueError(f"{where}: a reference reads 'E<n>:<number>', got {text!r}")
        if direction not in (None, "supports", "refutes"):
            raise ValueError(f"{where}: direction must be 'supports' or 'refutes'")
        return cls(experiment, number, direction, why)


@dataclass(frozen=True)
class Part:
    """One part of an item's quoted sentence and what bears on it."""

    id: str
    quote: str
    criteria: tuple[Ref, ...] = ()
    gates: tuple[Ref, ...] = ()
    algebra: str = ""
    untested: str = ""
    beside: str = ""
    reads: str = ""
    read_why: str = ""
    instance: str = ""


@dataclass(frozen=True)
class Alternative:
    """A reasonable other choice the verdict is shown under (see the module docstring)."""

    id: str
    kind: str
    says: str
    parts: Mapping[str, tuple[Ref, ...]] | None = None
    part: str = ""
    experiment: str = ""
    mean_of: tuple[str, ...] = ()
    op: str = ""
    threshold: float = 0.0
    criterion: Ref | None = None
    suffix: str = ""
    reading: str = "sound"


@dataclass(frozen=True)
class Seen:
    """A measure or criterion of an item changed after its data were seen: when, what changed,
    and what the first-stated one had read."""

    date: str
    changed: str
    first_read: str

    @property
    def text(self) -> str:
        return f"{self.changed} ({self.date}), after the first-stated one read {self.first_read}"


@dataclass(frozen=True)
class Item:
    id: str
    parts: tuple[Part, ...]
    rule: str = "all"
    alternatives: tuple[Alternative, ...] = ()
    not_testable: str = ""
    form: str | None = None
    form_why: str = ""
    seen: tuple[Seen, ...] = ()

    @property
    def verdict_parts(self) -> tuple[Part, ...]:
        """The parts the verdict is read from (those beside it left out)."""
        return tuple(p for p in self.parts if not p.beside)

    @property
    def rule_text(self) -> str:
        form = f"{self.form}: {FORMS[self.form]}; parts: " if self.form else ""
        return form + RULES[self.rule]


@dataclass(frozen=True)
class Link:
    """Two items whose verdicts cannot both be any of the `contradict` pairs."""

    items: tuple[str, str]
    contradict: tuple[tuple[str, str], ...]
    reason: str


@dataclass(frozen=True)
class Registry:
    """The items and links, the content `hash`, and when the rules were `registered` (UTC, as
    `registration.TIME_FORMAT`; empty: never) with what had been `seen` by then."""

    items: Mapping[str, Item]
    links: tuple[Link, ...]
    hash: str
    registered: str = ""
    seen: str = ""

    def set_after(self, started: str | None) -> bool:
        """Whether these rules were registered after a measurement `started` then (its data
        could have been seen when the rules were written)."""
        return bool(self.registered and started and started < self.registered)

    def refs(self) -> set[tuple[str, str]]:
        """Every criterion an item part reads (alternatives left out)."""
        return {r.key for item in self.items.values() for p in item.parts for r in p.criteria}


def _part(data: Mapping[str, Any], where: str) -> Part:
    known = {"id", "quote", "criteria", "gates", "algebra", "untested", "beside", "reads"}
    known |= {"instance"}
    unknown = set(data) - known - {"read_why"}
    if unknown or not data.get("id") or not data.get("quote"):
        raise ValueError(f"{where}: a part needs id and quote, and knows no {sorted(unknown)}")
    where = f"{where} part {data['id']!r}"
    if data.get("reads") not in (None, "for", "against") or (
        bool(data.get("reads")) != bool(data.get("read_why"))
    ):
        raise ValueError(f"{where}: reads is 'for' or 'against', with read_why quoting the text")
    return Part(
        str(data["id"]),
        str(data["quote"]),
        tuple(Ref.parse(r, where) for r in data.get("criteria", [])),
        tuple(Ref.parse(r, where) for r in data.get("gates", [])),
        str(data.get("algebra", "")),
        str(data.get("untested", "")),
        str(data.get("beside", "")),
        str(data.get("reads") or ""),
        str(data.get("read_why", "")),
        str(data.get("instance", "")),
    )


def _alternative(data: Mapping[str, Any], parts: set[str], where: str) -> Alternative:
    kind, ident = data.get("kind"), data.get("id")
    where = f"{where} alternative {ident!r}"
    if kind not in ALTERNATIVE_KINDS or not ident or not data.get("says"):
        raise ValueError(f"{where}: needs id, says and a kind among {ALTERNATIVE_KINDS}")
    named = set(data.get("parts") or {}) | ({data["part"]} if data.get("part") else set())
    if named - parts:
        raise ValueError(f"{where}: no part named {sorted(named - parts)}")
    if kind == "dataset" and not str(data.get("suffix", "")).startswith("@"):
        raise ValueError(f"{where}: a dataset alternative needs a suffix such as '@wine'")
    if kind == "measure" and not (data.get("part") and data.get("mean_of") and data.get("op")):
        raise ValueError(f"{where}: a measure alternative needs part, mean_of, op, threshold")
    if kind == "threshold" and not data.get("criterion"):
        raise ValueError(f"{where}: a threshold alternative needs criterion and threshold")
    reading = data.get("reading", "uncontrolled" if kind == "measure" else "sound")
    if reading not in ALTERNATIVE_READINGS or (kind == "measure" and reading == "sound"):
        raise ValueError(
            f"{where}: reading must be one of {ALTERNATIVE_READINGS} (a measure, a point "
            f"estimate without controls, is never sound), got {reading!r}"
        )
    return Alternative(
        str(ident),
        str(kind),
        str(data["says"]),
        parts={
            p: tuple(Ref.parse(r, where) for r in refs)
            for p, refs in (data.get("parts") or {}).items()
        },
        part=str(data.get("part", "")),
        experiment=str(data.get("experiment", "")),
        mean_of=tuple(data.get("mean_of", ())),
        op=str(data.get("op", "")),
        threshold=float(data.get("threshold", 0.0)),
        criterion=Ref.parse(data["criterion"], where) if data.get("criterion") else None,
        suffix=str(data.get("suffix", "")),
        reading=str(reading),
    )


def _seen(data: Any, where: str) -> Seen:
    if not isinstance(data, Mapping) or not all(
        data.get(k) for k in ("date", "changed", "first_read")
    ):
        raise ValueError(f"{where}: each 'seen' entry needs date, changed and first_read")
    return Seen(str(data["date"]), str(data["changed"]), str(data["first_read"]))


def _check_form(item: Item, where: str, required: bool) -> None:
    """The form is known and the item is built as its form needs (`ValueError` naming it)."""
    read = [p for p in item.verdict_parts if p.reads]
    if read and item.form != "presentation":
        raise ValueError(f"{where}: only an item about presentation is decided by reading")
    if item.form is None:
        if required:
            raise ValueError(f"{where}: needs a form, one of {sorted(FORMS)}, and form_why")
        return
    if item.form not in FORMS:
        raise ValueError(f"{where}: unknown form {item.form!r}, not one of {sorted(FORMS)}")
    if required and not item.form_why:
        raise ValueError(f"{where}: form {item.form!r} needs form_why (the words that decide it)")
    if not item.verdict_parts:
        raise ValueError(f"{where}: every part is beside the item; the verdict needs one")
    instances = {p.instance for p in item.verdict_parts if p.instance}
    if instances and item.form != "existential":
        raise ValueError(f"{where}: only an existential item is read per instance")
    if len(instances) == 1:
        raise ValueError(f"{where}: instances {sorted(instances)}: one instance is no choice")
    if item.form == "identity" and any(not (p.gates or p.algebra) for p in item.verdict_parts):
        raise ValueError(f"{where}: an identity is read from gates or algebra in every part")
    if item.form == "presentation" and not (
        item.not_testable or len(read) == len(item.verdict_parts)
    ):
        raise ValueError(
            f"{where}: a presentation item is read from the text in every part (reads), or says "
            "why nothing decides it (not_testable)"
        )


def _item(ident: str, data: Mapping[str, Any], require_form: bool = False) -> Item:
    where = f"items.json item {ident}"
    rule = data.get("rule", "all")
    if rule not in RULES:
        raise ValueError(f"{where}: rule must be one of {sorted(RULES)}, got {rule!r}")
    parts = tuple(_part(p, where) for p in data.get("parts", []))
    ids = [p.id for p in parts]
    if not parts or len(set(ids)) != len(ids):
        raise ValueError(f"{where}: needs at least one part, each with its own id")
    alternatives = tuple(_alternative(a, set(ids), where) for a in data.get("alternatives", []))
    form = data.get("form")
    item = Item(
        ident,
        parts,
        rule,
        alternatives,
        str(data.get("not_testable", "")),
        None if form is None else str(form),
        str(data.get("form_why", "")),
        tuple(_seen(s, where) for s in data.get("seen", [])),
    )
    _check_form(item, where, require_form)
    return item


def registry_from_data(data: Mapping[str, Any], items: Sequence[str] | None = None) -> Registry:
    """The registry from the parsed `items.json` (`ValueError` naming what is wrong); `items`,
    when given, are the ids it must hold exactly, each with its logical form (a registry
    without `items`, such as a test's, may leave the form out: its parts then combine by the
    rule alone)."""
    entries = data.get("items", {})
    if items is not None and set(entries) != set(items):
        missing, extra = sorted(set(items) - set(entries)), sorted(set(entries) - set(items))
        raise ValueError(f"items.json: missing items {missing}, unknown items {extra}")
    parsed = {ident: _item(ident, entry, items is not None) for ident, entry in entries.items()}
    links = []
    for link in data.get("links", []):
        pair = tuple(link.get("items", ()))
        if len(pair) != 2 or set(pair) - set(parsed) or not link.get("reason"):
            raise ValueError(f"items.json link {pair}: needs two known items and a reason")
        links.append(Link(pair, tuple(tuple(c) for c in link["contradict"]), link["reason"]))
    relevant = {k: v for k, v in data.items() if k not in ("registered", "seen")}
    blob = json.dumps(relevant, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    registered, seen = str(data.get("registered", "")), str(data.get("seen", ""))
    return Registry(parsed, tuple(links), digest, registered, seen)


@cache
def load_registry(path: Path = ITEMS_FILE) -> Registry:
    """The item registry from `path` (package data), checked against the claims' ids."""
    from implicit_em.report.rules.claims import CLAIMS

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the item registry {path} ({err})") from err
    return registry_from_data(data, list(CLAIMS))

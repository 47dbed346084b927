"""What a verdict rests on, as two keys: the measurement key and the judgement key.

**Measurement record** of an experiment run: the hash (`imports.module_hash`) of every module of
the `implicit_em` package the experiment can use (`measurement_modules`: the import closure of
its module, found from the source, united with the package's modules first imported while it
ran), its `config` (the run's size and configuration, device included, and its controls'
configuration), the hash of every `data` file its configuration names (`data_hashes`), the
`versions` of the numerical libraries those modules import (`libraries_used`), and its
`device`. Its **measurement
key** is `digest(record)`; a change to any of them calls for a rerun.

**Judgement record**: the hashes of the judging and statistics modules (`judgement_modules`:
the judging, statistics and item-verdict modules and the report modules they import) and the
hash of the experiment's registered `rule` (its protocol without its sizes: criteria, gates,
thresholds). Its **judgement key** is the digest; a change to it calls for judging the published
per-seed samples again, not for measuring again.

The report's framework (runner, registry, protocols) imports the judging modules; a walk from
an experiment does not follow those edges, so judging code counts as measurement code only
where measurement code (an experiment module or the library) imports it itself. Nor does it
follow the framework's edges into the modules that record what a unit used (`RECORDING`: its
CPU seconds and the machine line, which change no value), so that a change to how usage is
recorded or the machine line is worded leaves every measurement key as it was.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from implicit_em.data import data_set_files
from implicit_em.report.rules.protocol import ITEM_MARKS, Protocol, content_hash
from implicit_em.report.running.imports import (
    SOURCE_ROOT,
    closure,
    imported_packages,
    module_file,
    module_hash,
)
from implicit_em.report.running.registry import Experiment

__all__ = [
    "JUDGEMENT_ROOTS",
    "LIBRARIES",
    "RECORDING",
    "data_hashes",
    "digest",
    "judgement_changes",
    "judgement_record",
    "keyed",
    "measurement_changes",
    "measurement_modules",
    "measurement_record",
    "rule_hash",
    "run_measurement",
    "still_measured",
]

JUDGEMENT_ROOTS = (
    "implicit_em.report.judging.rule",
    "implicit_em.report.judging.stats",
    "implicit_em.report.judging.item_verdicts",
    "implicit_em.report.rules.claims",
)
"""The modules that turn measured numbers into verdicts."""

RECORDING = frozenset({"implicit_em.report.running.usage", "implicit_em.machine"})
"""The modules that record what a unit used and where (`running.usage`, `machine`): the
framework reaches them from `running.plan`, but they change no measured value."""

LIBRARIES = {
    "torch": "torch",
    "numpy": "numpy",
    "sklearn": "scikit-learn",
    "scipy": "scipy",
    "cleanlab": "cleanlab",
    "crowdkit": "crowd-kit",
    "entmax": "entmax",
    "transformers": "transformers",
}
"""The numerical libraries whose versions a measurement records (import name: distribution)."""

_REPORT = "implicit_em.report"
_EXPERIMENTS = "implicit_em.report.experiments"


def digest(record: Mapping[str, Any]) -> str:
    """The key of a record: SHA-256 (16 hex digits) of its canonical JSON."""
    blob = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def judgement_modules(root: Path = SOURCE_ROOT) -> set[str]:
    """The judging modules and every report module they import."""
    return closure(JUDGEMENT_ROOTS, root, follow=lambda a, b: b.startswith(_REPORT + "."))


def _framework(name: str) -> bool:
    """A module of the report's framework (not an experiment's measurement code)."""
    return name == _REPORT or (name.startswith(_REPORT + ".") and not name.startswith(_EXPERIMENTS))


def measurement_modules(
    start: str, root: Path = SOURCE_ROOT, loaded: Iterable[str] = ()
) -> set[str]:
    """The package's modules that the experiment whose module is `start` can use: its import
    closure, where the framework's edges into judging code, into the list of experiments and
    into the recording modules (`RECORDING`) are not followed, united with `loaded` (the
    package's modules first imported during the run) less the judging and recording modules."""
    judging = judgement_modules(root)
    unfollowed = judging | RECORDING | {_EXPERIMENTS}

    def follow(here: str, there: str) -> bool:
        return not (_framework(here) and there in unfollowed)

    found = closure([start], root, follow)
    return found | {m for m in loaded if m.startswith("implicit_em") and m not in unfollowed}


def measurement_record(
    start: str,
    size: str,
    config: Mapping[str, Any],
    control: Mapping[str, Any],
    loaded: Iterable[str] = (),
    root: Path = SOURCE_ROOT,
) -> dict[str, Any]:
    """The measurement record of a run of the experiment whose module is `start` (see the
    module docstring); `loaded` are the modules first imported while it ran."""
    modules = sorted(measurement_modules(start, root, loaded))
    config = json.loads(json.dumps(config, default=str))
    control = json.loads(json.dumps(control, default=str))
    return {
        "modules": {m: module_hash(m, root) for m in modules},
        "config": {"size": size, "run": config, "control": control},
        "data": data_hashes(config, control),
        "versions": library_versions(libraries_used(modules, root)),
        "device": device_kind(str(config.get("device", "cpu"))),
    }


def device_kind(device: str) -> str:
    """The device a run measured on: `cpu`, or a CUDA device with its model
    (`cuda (NVIDIA H100 80GB HBM3)`)."""
    torch = sys.modules.get("torch")
    if not device.startswith("cuda") or torch is None or not torch.cuda.is_available():
        return device
    return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"


def measurement_changes(
    recorded: Mapping[str, Any],
    config: Mapping[str, Any],
    control: Mapping[str, Any],
    root: Path = SOURCE_ROOT,
) -> list[str]:
    """What differs between a `recorded` measurement record and the current source, data files
    and libraries for the same modules, files and libraries, with the current `config` and
    `control` configurations: one phrase per changed input (empty: nothing changed)."""
    changes = [
        f"{_file_of(name, root)} {'removed' if module_hash(name, root) == 'missing' else 'changed'}"
        for name, sha in sorted(recorded["modules"].items())
        if module_hash(name, root) != sha
    ]
    run = json.loads(json.dumps(config, default=str))
    if recorded["config"].get("run") != run:
        changes.append(f"its {recorded['config'].get('size')} configuration changed")
    if recorded["config"].get("control") != json.loads(json.dumps(control, default=str)):
        changes.append("its controls' configuration changed")
    data = data_hashes(config, control)
    for name in sorted(set(recorded["data"]) | set(data)):
        if name not in data:
            changes.append(f"data file {name} not found here")
        elif recorded["data"].get(name) != data[name]:
            changes.append(f"data file {name} changed")
    current = library_versions(recorded["versions"])
    for name, version in sorted(recorded["versions"].items()):
        if current[name] != version:
            changes.append(f"{name} {version} at the run, {current[name]} here")
    device = str(config.get("device", "cpu"))
    if str(recorded.get("device", "")).split(" (")[0] != device:
        changes.append(f"device {recorded.get('device')} at the run, {device} now")
    return changes


def judgement_record(protocol: Protocol, root: Path = SOURCE_ROOT) -> dict[str, Any]:
    """The judgement record of an experiment with `protocol`: the judging modules' hashes, the
    hash of its rule (the protocol less its sizes) and of the item rules (`items.json`)."""
    return {
        "modules": {m: module_hash(m, root) for m in sorted(judgement_modules(root))},
        "rule": rule_hash(protocol),
        "items": item_rules_hash(root),
        "marks": marks_hash(protocol),
    }


def marks_hash(protocol: Protocol) -> str:
    """The hash of the item marks on `protocol`'s criteria (by construction, the kind of the
    negative control, the baseline a comparison needs): they decide how items read it."""
    marks = {
        c.get("number", ""): {k: c[k] for k in ITEM_MARKS if k in c}
        for c in protocol.data.get("criteria", [])
    }
    return hashlib.sha256(json.dumps(marks, sort_keys=True).encode()).hexdigest()[:16]


def item_rules_hash(root: Path = SOURCE_ROOT) -> str:
    """The hash of the item rules' content (`report/protocols/items.json` under `root`):
    parts, criteria, rules, alternatives and links; `"missing"` without the file."""
    path = root / "implicit_em" / "report" / "protocols" / "items.json"
    try:
        return content_hash(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return "missing"


def rule_hash(protocol: Protocol) -> str:
    """The hash of the decision rule of `protocol`: its criteria, gates and thresholds, without
    its prose and its sizes (`protocol.content_hash`)."""
    return content_hash({k: v for k, v in protocol.data.items() if k != "sizes"})


def judgement_changes(
    recorded: Mapping[str, Any], protocol: Protocol, root: Path = SOURCE_ROOT
) -> list[str]:
    """What differs between a `recorded` judgement record and the current judging code and
    rule of `protocol`: one phrase per changed input (empty: nothing changed)."""
    current = judgement_record(protocol, root)
    names = sorted(set(recorded["modules"]) | set(current["modules"]))
    changes = [
        f"{_file_of(n, root)} changed"
        for n in names
        if recorded["modules"].get(n) != current["modules"].get(n)
    ]
    if recorded.get("rule") != current["rule"]:
        changes.append(f"its rule (criteria, gates, thresholds) changed: {protocol.id}.json")
    if recorded.get("items") != current["items"]:
        changes.append("the item rules changed: items.json")
    if recorded.get("marks") != current["marks"]:
        changes.append(f"its criteria's item marks changed: {protocol.id}.json")
    return changes


def libraries_used(modules: Iterable[str], root: Path = SOURCE_ROOT) -> set[str]:
    """The `LIBRARIES` that `modules` import, with the `LIBRARIES` those require in turn (as
    their installed distributions declare: scikit-learn requires numpy and scipy)."""
    found = {p for m in modules for p in imported_packages(m, root)} & set(LIBRARIES)
    todo = list(found)
    while todo:
        for name in _required(LIBRARIES[todo.pop()]):
            if name not in found:
                found.add(name)
                todo.append(name)
    return found


@cache
def _required(distribution: str) -> tuple[str, ...]:
    """The `LIBRARIES` (import names) that an installed distribution requires."""
    try:
        requirements = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return ()
    needed = [r for r in requirements if "extra" not in r.partition(";")[2]]  # not optional
    names = {re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0].lower() for r in needed}
    return tuple(n for n, d in LIBRARIES.items() if d in names)


def library_versions(names: Iterable[str]) -> dict[str, str]:
    """The installed version of each library (by import name; `not installed` when absent)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(LIBRARIES.get(name, name))
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def file_hash(path: Path) -> str:
    """SHA-256 (16 hex digits) of a file's bytes, or `"missing"`."""
    try:
        stat = path.stat()
    except OSError:
        return "missing"
    return _bytes_hash(str(path), stat.st_size, stat.st_mtime_ns)


@cache
def _bytes_hash(path: str, size: int, mtime_ns: int) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()[:16]


def data_hashes(*configs: Mapping[str, Any]) -> dict[str, str]:
    """The hash of each file of every data set the configurations name, by file name (the files
    the data loader finds on this machine now, `data.data_set_files`)."""
    return {p.name: file_hash(p) for p in sorted(_data_paths(*configs))}


def _data_paths(*configs: Mapping[str, Any]) -> set[Path]:
    """The files of every data set a configuration names (a string value anywhere in it that
    is a data set's name)."""
    names: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, str):
            names.add(value)
        elif isinstance(value, Mapping):
            for v in value.values():
                visit(v)
        elif isinstance(value, list | tuple):
            for v in value:
                visit(v)

    for config in configs:
        visit(config)
    return {path for name in names for path in data_set_files(name)}


def _file_of(name: str, root: Path) -> str:
    """A module's file as a reader looks for it: `implicit_em/mixture/estimator.py`."""
    path = module_file(name, root)
    if path is None:
        return name.replace(".", "/") + ".py"
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def run_measurement(
    experiment: Experiment, size: str, config: Mapping[str, Any], loaded: Iterable[str] = ()
) -> dict[str, Any]:
    """The measurement record of `experiment`'s run at `size` with `config` (`loaded`: the
    modules first imported while it ran)."""
    return measurement_record(
        experiment.aggregate.__module__, size, config, experiment.configs["control"], loaded
    )


def still_measured(
    recorded: Mapping[str, Any] | None, experiment: Experiment, config: Mapping[str, Any]
) -> bool:
    """Whether a cached result measured with the `recorded` record is what a run with `config`
    would measure now (False when nothing was recorded)."""
    if not recorded:
        return False
    return not measurement_changes(recorded, config, experiment.configs["control"])


def keyed(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A record with its key, as results and publications keep it."""
    return None if record is None else {"key": digest(record), "record": dict(record)}

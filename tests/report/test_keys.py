"""The measurement and judgement keys, and the freshness check that reads them, both ways.

A real experiment (E1, at smoke size) runs into a temporary folder and its report stands for a
publication. Every edit is made in a copy of the package under the test's folder (`root`), never
in the tree the tests run from: each edit must make the check fail with the right kind of stale
and name the changed input, and an edit to documentation alone must not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from implicit_em.report.judging.rejudge import rejudge_publication as rejudge
from implicit_em.report.publishing.freshness import (
    LEGACY,
    REJUDGE,
    published_document,
    stale_experiments,
)
from implicit_em.report.rules import registration as reg
from implicit_em.report.rules.protocol import Protocol
from implicit_em.report.running.build import write_report
from implicit_em.report.running.imports import SOURCE_ROOT, closure, imports_of, module_hash
from implicit_em.report.running.keys import (
    RECORDING,
    measurement_changes,
    measurement_modules,
    measurement_record,
)
from implicit_em.report.running.provenance import tree_state
from implicit_em.report.running.registry import select
from implicit_em.report.running.runner import run_experiments

E1_MODULE = "implicit_em.report.experiments.e1_identities"


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """E1 run at smoke size: the folder of its report (results.json, index.html, figures)."""
    out = tmp_path_factory.mktemp("e1")
    results = run_experiments(select(["E1"]), "smoke", out, log=lambda line: None)
    write_report(results, "smoke", out, published=None)
    return out


@pytest.fixture
def copy(tmp_path) -> Path:
    """A copy of the package's source: the `root` every edit is made in."""
    shutil.copytree(
        SOURCE_ROOT / "implicit_em",
        tmp_path / "src" / "implicit_em",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return tmp_path / "src"


def _edit(root: Path, module: str, text: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def _document(folder: Path) -> dict:
    return published_document(folder)


def test_the_import_graph_follows_lazy_relative_and_re_exported_imports(tmp_path):
    package = tmp_path / "implicit_em"
    (package / "lib").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "lib/__init__.py": "from implicit_em.lib.deep import Thing\n",
        "lib/deep.py": "from . import leaf\n\nclass Thing:\n    pass\n",
        "lib/leaf.py": "X = 1\n",
        "lazy.py": "def f():\n    import implicit_em.hidden\n",
        "hidden.py": "Y = 2\n",
        "start.py": "from implicit_em.lib import Thing\nfrom implicit_em import lazy\n",
        "viaattr.py": "import implicit_em as iem\n\nZ = iem.hidden.Y\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    assert imports_of("implicit_em.start", tmp_path) == {"implicit_em.lib.deep", "implicit_em.lazy"}
    assert imports_of("implicit_em.viaattr", tmp_path) == {"implicit_em", "implicit_em.hidden"}
    assert closure(["implicit_em.start"], tmp_path) == {
        "implicit_em.start",
        "implicit_em.lib.deep",
        "implicit_em.lib.leaf",
        "implicit_em.lazy",
        "implicit_em.hidden",
    }
    before = module_hash("implicit_em.lib.leaf", tmp_path)
    (package / "lib" / "leaf.py").write_text('"""A docstring."""\n\nX = 1  # a comment\n')
    assert module_hash("implicit_em.lib.leaf", tmp_path) == before
    (package / "lib" / "leaf.py").write_text("X = 2\n")
    assert module_hash("implicit_em.lib.leaf", tmp_path) != before


def test_the_record_holds_what_the_run_used(published):
    (entry,) = _document(published)["experiments"]
    record = entry["measurement"]["record"]
    assert len(entry["measurement"]["key"]) == 16 and len(entry["judgement"]["key"]) == 16
    assert E1_MODULE in record["modules"] and "implicit_em.core" in record["modules"]
    assert "implicit_em.report.judging.rule" not in record["modules"]  # judged, not measured
    assert record["config"]["size"] == "smoke" and record["device"] == "cpu"
    assert "torch" in record["versions"] and record["data"] == {}
    import sklearn  # noqa: F401  (loaded in this process, but not by E1's code)

    assert "sklearn" not in measurement_record(E1_MODULE, "smoke", {}, {})["versions"]
    judged = entry["judgement"]["record"]["modules"]
    assert {"implicit_em.report.judging.rule", "implicit_em.report.judging.stats"} <= set(judged)
    assert stale_experiments(_document(published), select(["E1"])) == []


def test_an_edit_three_imports_away_is_measurement_stale_and_named(published, copy):
    assert "implicit_em.core" not in imports_of(E1_MODULE)  # E1 -> identities -> gradients -> core
    assert "implicit_em.core" not in imports_of("implicit_em.identities")
    assert "implicit_em.core" in imports_of("implicit_em.identities.gradients")
    _edit(copy, "implicit_em.core", "\n\nNEW_CONSTANT = 1.0\n")
    (stale,) = stale_experiments(_document(published), select(["E1"]), root=copy)
    assert (stale.id, stale.kind, stale.reason) == (
        "E1",
        "measurement",
        "implicit_em/core.py changed",
    )
    assert stale.command.startswith("implicit-em report --full")


def test_an_edit_of_documentation_alone_passes(published, copy):
    core = copy / "implicit_em" / "core.py"
    text = core.read_text(encoding="utf-8")
    start = text.index('"""') + 3
    core.write_text(text[:start] + "Reworded. " + text[start:] + "\n# a comment\n")
    (copy.parent / "docs").mkdir()
    (copy.parent / "docs" / "report.md").write_text("# edited documentation\n")
    assert stale_experiments(_document(published), select(["E1"]), root=copy) == []


def test_an_edit_of_the_statistics_is_judgement_stale_and_named(published, copy):
    _edit(copy, "implicit_em.report.judging.stats", "\n\nALPHA = 0.01\n")
    (stale,) = stale_experiments(_document(published), select(["E1"]), root=copy)
    assert (stale.kind, stale.reason, stale.command) == (
        "judgement",
        "implicit_em/report/judging/stats.py changed",
        REJUDGE,
    )
    _edit(copy, "implicit_em.report.judging.rule", "\n\nSTRICT = True\n")
    (stale,) = stale_experiments(_document(published), select(["E1"]), root=copy)
    assert "implicit_em/report/judging/rule.py changed" in stale.reason


def test_an_edit_of_the_item_rules_is_judgement_stale_and_named(published, copy):
    path = copy / "implicit_em" / "report" / "protocols" / "items.json"
    rules = json.loads(path.read_text(encoding="utf-8"))
    rules["links"] = rules["links"][1:]  # a link between items dropped
    path.write_text(json.dumps(rules), encoding="utf-8")
    (stale,) = stale_experiments(_document(published), select(["E1"]), root=copy)
    assert (stale.kind, stale.reason) == ("judgement", "the item rules changed: items.json")


def _with_threshold(experiment, threshold: float):
    data = json.loads(json.dumps(experiment.protocol.data))
    data["gates"][0]["threshold"] = threshold
    return replace(experiment, protocol=Protocol.from_data(data))


def test_a_changed_threshold_is_judgement_stale(published):
    (e1,) = select(["E1"])
    (stale,) = stale_experiments(_document(published), [_with_threshold(e1, 1e-6)])
    assert stale.kind == "judgement"
    assert stale.reason == "its rule (criteria, gates, thresholds) changed: E1.json"
    reworded = json.loads(json.dumps(e1.protocol.data))
    reworded["gates"][0]["means"] = "reworded prose"
    same = replace(e1, protocol=Protocol.from_data(reworded))
    assert stale_experiments(_document(published), [same]) == []


def test_a_different_library_version_is_measurement_stale(published):
    document = _document(published)
    document["experiments"][0]["measurement"]["record"]["versions"]["torch"] = "1.0.0"
    (stale,) = stale_experiments(document, select(["E1"]))
    assert stale.kind == "measurement"
    assert stale.reason.startswith("torch 1.0.0 at the run, ")


def test_a_publication_without_keys_is_reported_as_such(published):
    document = _document(published)
    del document["experiments"][0]["measurement"]
    (stale,) = stale_experiments(document, select(["E1"]))
    assert (stale.kind, stale.reason) == ("measurement", LEGACY)


def test_a_changed_data_file_is_measurement_stale_and_named(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    for stem in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"):
        (data / f"{stem}-ubyte.gz").write_bytes(b"\x1f\x8b original")
    monkeypatch.setenv("IMPLICIT_EM_DATA", str(data))
    config, control = {"data": "fashion-mnist", "device": "cpu"}, {"seeds": [0]}
    record = measurement_record(E1_MODULE, "full", config, control)
    assert set(record["data"]) == {p.name for p in data.iterdir()}
    assert measurement_changes(record, config, control) == []
    (data / "t10k-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b another file, longer")
    assert measurement_changes(record, config, control) == [
        "data file t10k-labels-idx1-ubyte.gz changed"
    ]
    (data / "t10k-labels-idx1-ubyte.gz").unlink()  # the loader now looks elsewhere
    changes = measurement_changes(record, config, control)
    assert changes and all(c.startswith("data file ") for c in changes)


def test_a_changed_configuration_or_removed_module_is_named(published, copy):
    (entry,) = _document(published)["experiments"]
    record = entry["measurement"]["record"]
    (e1,) = select(["E1"])
    config = {**e1.configs["smoke"], "device": "cpu", "seeds": [0, 1]}
    changes = measurement_changes(record, config, e1.configs["control"], root=copy)
    assert changes == ["its smoke configuration changed"]
    (copy / "implicit_em" / "core.py").unlink()
    config = {**e1.configs["smoke"], "device": "cpu"}
    changes = measurement_changes(record, config, e1.configs["control"], root=copy)
    assert changes == ["implicit_em/core.py removed"]


def test_judging_code_reached_by_measurement_code_counts_as_measurement():
    e8 = "implicit_em.report.experiments.e8_open_set"
    assert "implicit_em.report.judging.stats" in measurement_modules(e8)  # its notes use intervals
    assert "implicit_em.report.judging.stats" not in measurement_modules(E1_MODULE)
    assert "implicit_em.report.experiments.e2_trajectories" not in measurement_modules(E1_MODULE)


def test_rejudging_recomputes_the_verdict_under_the_new_rule(published, tmp_path):
    folder = tmp_path / "published"
    shutil.copytree(published, folder, ignore=shutil.ignore_patterns("cache", "units"))
    (e1,) = select(["E1"])
    before = _document(folder)["experiments"][0]
    assert before["verdict"] == "holds" and "judged again" not in str(
        before.get("exploratory_reason")
    )
    strict = [_with_threshold(e1, -1.0)]  # no error can be below -1: the gate must fail
    assert rejudge(folder, strict) == ["E1"]
    after = _document(folder)["experiments"][0]
    assert after["verdict"] == "invalid" and after["exploratory"] is True
    assert after["exploratory_reason"].startswith("judged again on ")
    assert after["rejudged"]["changed"] == "its rule (criteria, gates, thresholds) changed: E1.json"
    assert after["samples"] == before["samples"] and after["numbers"] == before["numbers"]
    assert stale_experiments(_document(folder), strict) == []
    assert rejudge(folder, strict) == []
    assert "judged again" in (folder / "index.html").read_text(encoding="utf-8")


def test_a_change_after_the_data_were_seen_makes_the_verdict_exploratory(tmp_path):
    path = tmp_path / "registry.json"
    entry = {
        "id": "E1",
        "started": "2026-01-01 00:00:00 UTC",
        "seeds": [1000, 1001],
        "measurement": {"key": "m0"},
        "judgement": {"key": "j0"},
    }
    assert reg.record_data_seen([entry], "full", path) == ["E1"]
    assert reg.record_data_seen([{**entry, "started": "later"}], "full", path) == []
    registry = reg.read_registry(path)
    assert registry["E1"]["data_seen"]["full"]["when"] == "2026-01-01 00:00:00 UTC"
    reason = reg.exploratory_reason
    assert reason("E1", "full", [1000, 1001], "m0", "j0", registry) is None
    assert "its measurement" in reason("E1", "full", [1000], "m1", "j0", registry)
    judged = reason("E1", "full", [1001], "m0", "j1", registry)
    assert judged.startswith("its judging code or rule changed after its full data were first seen")
    assert reason("E1", "full", [2000], "m1", "j1", registry) is None  # fresh seeds
    assert reason("E1", "quick", [1000], "m1", "j1", registry) is None


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def test_the_tree_state_says_whether_a_checkout_is_clean(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "src" / "implicit_em").mkdir(parents=True)
    (checkout / "src" / "implicit_em" / "__init__.py").write_text("")
    _git(checkout, "init", "-q")
    _git(checkout, "add", "-A")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    assert tree_state(checkout).clean and len(tree_state(checkout).commit) == 12
    (checkout / "src" / "implicit_em" / "new.py").write_text("X = 1\n")
    state = tree_state(checkout)
    assert not state.clean and state.changed == ("src/implicit_em/new.py",)
    assert not tree_state(tmp_path).clean  # not a checkout of the package


def test_recording_what_a_unit_used_is_not_measurement_code():
    measured = measurement_modules(E1_MODULE)
    assert "implicit_em.report.running.plan" in measured  # computes the unit's value
    assert not measured & RECORDING  # CPU seconds and the machine line change no value
    assert not measurement_modules(E1_MODULE, loaded=RECORDING) & RECORDING
    e8 = "implicit_em.report.experiments.e8_open_set"
    assert "implicit_em.machine" in closure([e8])  # reachable: only the walk's rule leaves it out

"""Protocols as data, registered before the run: hashes, amendments, exploratory verdicts, and
`publish` refusing a run whose protocols were registered late or never."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.report import select
from implicit_em.report.rules import registration as reg
from implicit_em.report.rules.protocol import CONFIRMATION_SEEDS, Protocol, content_hash

BASE = {
    "id": "X1",
    "criteria": [
        {
            "number": "x",
            "op": "<=",
            "threshold": 1.0,
            "means": "small",
            "claim": "C1",
            "direction": "supports",
            "primary": True,
            "quote": "§3.1: ...",
        }
    ],
    "sizes": {
        "smoke": {"seeds": [0]},
        "quick": {"seeds": [0, 1]},
        "full": {"seeds": [1000, 1001]},
        "control": {"seeds": [0]},
    },
}


def _changed(**criterion) -> dict:
    return {**BASE, "criteria": [{**BASE["criteria"][0], **criterion}]}


def test_the_hash_reads_decisions_not_prose():
    same = content_hash(_changed(means="small, reworded", quote="§3.1: other words"))
    assert same == content_hash(BASE)
    assert content_hash(_changed(threshold=2.0)) != content_hash(BASE)
    assert content_hash(_changed(primary=False)) != content_hash(BASE)
    more_seeds = {**BASE, "sizes": {**BASE["sizes"], "full": {"seeds": [1000, 1001, 1002]}}}
    assert content_hash(more_seeds) != content_hash(BASE)


def test_confirmation_seeds_are_kept_apart():
    for size, seeds in (("full", [7]), ("quick", [CONFIRMATION_SEEDS])):
        bad = {**BASE, "sizes": {**BASE["sizes"], size: {"seeds": seeds}}}
        with pytest.raises(ValueError, match="seeds must be"):
            Protocol.from_data(bad)
    with pytest.raises(ValueError, match="sizes must be exactly"):
        Protocol.from_data({**BASE, "sizes": {"quick": {}}})


def test_the_report_s_confirmation_seeds_were_never_used_at_another_size():
    for experiment in select(None):
        confirm = set(experiment.protocol.seeds("full"))
        for size in ("smoke", "quick", "control"):
            assert not confirm & set(experiment.protocol.seeds(size)), (experiment.id, size)


def test_registration_amendments_and_exploratory_verdicts(tmp_path):
    path = tmp_path / "registry.json"
    first = Protocol.from_data(BASE)
    assert reg.register([first], path=path, when="2026-01-01 00:00:00 UTC") == ["X1"]
    assert reg.register([first], path=path) == []  # already registered: nothing to do
    status = reg.status(first, reg.read_registry(path))
    assert status.registered == "2026-01-01 00:00:00 UTC" and status.amendments == ()
    second = Protocol.from_data(_changed(threshold=0.5))
    assert reg.unregistered([second], reg.read_registry(path)) == ["X1"]
    with pytest.raises(ValueError, match="--reason"):
        reg.register([second], path=path)
    with pytest.raises(ValueError, match="--seen"):
        reg.register([second], reason="tighter", after_data=True, path=path)
    reg.register(
        [second],
        reason="tighter",
        after_data=True,
        seen="quick runs at 0.6",
        seeds_seen=[0, 1],
        path=path,
        when="2026-01-02 00:00:00 UTC",
    )
    status = reg.status(second, reg.read_registry(path))
    assert status.registered == "2026-01-02 00:00:00 UTC"
    assert [a.reason for a in status.amendments] == ["tighter"]
    assert status.exploratory([0, 1, 2]) and not status.exploratory([1000, 1001])
    # the first version is still known, with no amendment before it
    assert reg.status(first, reg.read_registry(path)).amendments == ()


def test_check_run_refuses_unregistered_and_late_registrations(tmp_path):
    path = tmp_path / "registry.json"
    protocol = Protocol.from_data(BASE)
    reg.register([protocol], path=path, when="2026-01-02 00:00:00 UTC")
    registry = reg.read_registry(path)

    def entry(started: str | None, digest: str = protocol.hash) -> dict:
        return {"id": "X1", "protocol": {"hash": digest}, "started": started}

    assert reg.check_run([entry("2026-01-03 00:00:00 UTC")], registry) == []
    (late,) = reg.check_run([entry("2026-01-01 00:00:00 UTC")], registry)
    assert "registered 2026-01-02 00:00:00 UTC, after the run started" in late
    (never,) = reg.check_run([entry("2026-01-03 00:00:00 UTC", "0" * 16)], registry)
    assert "never registered" in never
    (unknown,) = reg.check_run([{"id": "X1"}], registry)
    assert "does not record" in unknown


def test_every_protocol_of_the_report_is_registered():
    protocols = [e.protocol for e in select(None)]
    missing = reg.unregistered(protocols)
    assert not missing, (
        f"protocols changed without registration: {missing}; run `implicit-em register` "
        "(an amendment: --reason, and --after-data --seen --seeds-seen if data were seen)"
    )


def test_the_register_command_checks_and_registers(tmp_path, monkeypatch):
    monkeypatch.setattr(reg, "REGISTRY", tmp_path / "registry.json")
    runner = CliRunner()
    check = runner.invoke(app, ["register", "--check"])
    assert check.exit_code == 1 and "not registered: E1" in check.output
    done = runner.invoke(app, ["register"])
    assert done.exit_code == 0 and "registered: E1" in done.output
    assert runner.invoke(app, ["register", "--check"]).exit_code == 0
    saved = json.loads((tmp_path / "registry.json").read_text())
    assert saved["E1"]["versions"][0]["amendment"] is None
    bad = runner.invoke(app, ["register", "--after-data", "--seen", "x", "--seeds-seen", "a,b"])
    assert bad.exit_code == 2 and "--seeds-seen" in bad.output


def test_publishing_records_every_seed_list_as_seen_nested_ones_included(tmp_path):
    """E9's full size trains its top-k arm on seeds of its own (`topk.seeds`): those data are
    seen too, so a later change on them reads exploratory."""
    (e9,) = select(["E9"])
    config = e9.configs["full"]
    entry = {
        "id": "E9",
        "started": "2026-01-01 00:00:00 UTC",
        "seeds": config["seeds"],
        "config": {**config, "device": "cpu"},
        "measurement": {"key": "m0"},
        "judgement": {"key": "j0"},
    }
    path = tmp_path / "registry.json"
    assert reg.record_data_seen([entry], "full", path) == ["E9"]
    registry = reg.read_registry(path)
    seen = registry["E9"]["data_seen"]["full"]["seeds"]
    assert set(config["topk"]["seeds"]) <= set(seen)
    assert sorted(set(seen)) == sorted(set(config["seeds"]) | set(config["topk"]["seeds"]))
    assert reg.exploratory_reason("E9", "full", config["topk"]["seeds"], "m1", "j0", registry)

"""`implicit-em report --seeds`: a referee's seeds replace every experiment's, change the
configuration and the cache key, and the report is marked as a replication and compared."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.report import select
from implicit_em.report.judging.replication import (
    Replication,
    parse_seeds,
    replication,
    seed_text,
    used_seeds,
)
from implicit_em.report.rules.protocol import CONFIRMATION_SEEDS, seed_lists
from implicit_em.report.running.build import run_report
from implicit_em.report.running.runner import cache_key


def test_seeds_parse_as_lists_and_ranges():
    assert parse_seeds("2000-2003") == [2000, 2001, 2002, 2003]
    assert parse_seeds("2000,2003") == [2000, 2003]
    assert parse_seeds(" 7 , 2000-2001 ") == [7, 2000, 2001]
    assert seed_text([2003, 2000, 2001, 2002, 2010]) == "2000-2003, 2010"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x", "expected whole numbers and ranges"),
        ("1,,2", "expected whole numbers and ranges"),
        ("-3", "expected whole numbers and ranges"),
        ("9-3", "runs backwards"),
        ("1,2,1", "1 repeats"),
        ("5000000000", "at most 4294967295"),
        ("0-99999999", "at most 10000 seeds"),
    ],
)
def test_bad_seeds_are_refused(text, says):
    with pytest.raises(ValueError, match=says):
        parse_seeds(text)


def test_the_options_exclude_each_other_and_an_offset_must_move():
    assert replication(None, None) is None
    assert replication("3", None) == Replication(seeds=(3,))
    assert replication(None, 100) == Replication(offset=100)
    with pytest.raises(ValueError, match="give one of them"):
        replication("3", 5)
    with pytest.raises(ValueError, match="--seed-offset 0"):
        replication(None, 0)


@pytest.mark.parametrize(
    "args",
    [["--seeds", "9-3"], ["--seeds", "2000", "--seed-offset", "2"], ["--seed-offset", "-1"]],
)
def test_the_cli_refuses_bad_seeds_in_one_line(args, tmp_path):
    done = CliRunner().invoke(
        app, ["report", "--smoke", "--only", "E1", "--out", str(tmp_path / "r"), *args]
    )
    assert done.exit_code == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: --seed")
    assert not (tmp_path / "r").exists()  # refused before anything ran


def test_every_seed_list_is_replaced_and_the_cache_key_follows():
    (e13,) = select(["E13"])
    for size in ("smoke", "quick", "full"):
        config = e13.configs[size]
        assert len(seed_lists(config)) > len(config["seeds"])  # a nested list too
        picked = Replication(seeds=(2000, 2001)).apply(config)
        assert picked["seeds"] == [2000, 2001] and picked["windtunnel"]["seeds"] == [2000, 2001]
        shifted = Replication(offset=5000).apply(config)
        assert seed_lists(shifted) == [s + 5000 for s in seed_lists(config)]
        assert {k: v for k, v in picked.items() if k not in ("seeds", "windtunnel")} == {
            k: v for k, v in config.items() if k not in ("seeds", "windtunnel")
        }
        assert cache_key(e13, size, picked) != cache_key(e13, size, dict(config))
        assert cache_key(e13, size, picked) != cache_key(e13, size, shifted)


def test_used_seeds_cover_every_protocol_and_amendment():
    used = used_seeds()
    for experiment in select(None):
        for size in ("smoke", "quick", "full", "control"):
            assert set(seed_lists(experiment.configs[size])) <= used
    fresh = Replication(seeds=(9000, 9001)).as_dict([9000, 9001])
    assert fresh["fresh"] and fresh["not_fresh"] == []
    full = sorted(select(["E2"])[0].configs["full"]["seeds"])
    stale = Replication(seeds=(3, full[0], 9000)).as_dict([3, full[0], 9000])
    assert not stale["fresh"] and stale["not_fresh"] == [3, full[0]]
    assert 3 < CONFIRMATION_SEEDS <= full[0]


def test_a_smoke_replication_is_marked_and_compared(tmp_path):
    published = tmp_path / "published.json"
    published.write_text(
        json.dumps(
            {
                "meta": {"date": "2026-01-01 00:00 UTC", "version": "0", "size": "full"},
                "experiments": [{"id": "E1", "verdict": "fails"}],
                "claim_verdicts": [],
            }
        )
    )
    out = tmp_path / "r"
    report = run_report(
        ["E1"],
        size="smoke",
        out=out,
        published=published,
        log=lambda line: None,
        replication=Replication(seeds=(0, 1)),
    )
    document = json.loads(report.json.read_text())
    meta = document["meta"]
    assert meta["replication"]["seeds"] == [0, 1] and not meta["replication"]["fresh"]
    assert meta["replication"]["not_fresh"] == [0, 1]
    (entry,) = document["experiments"]
    assert entry["config"]["seeds"] == [0, 1] and entry["seeds"] == [0, 1]
    assert entry["full_verdict"] == "fails"
    page = report.html.read_text()
    assert "REPLICATION on seeds 0-1: NOT fresh, seeds 0-1 were used" in page
    assert "full run: fails" in page and entry["verdict"] != "fails"
    assert "REPLICATION on seeds 0-1" in report.markdown.read_text()

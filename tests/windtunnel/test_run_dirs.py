"""A run's folder name is the cache's key: pinned, so a refactor cannot orphan finished runs.

A pinned name changes only when a `RunConfig` field or a preset changes, which renames the
folders of every run of that configuration: update the pins knowingly.
"""

from __future__ import annotations

from pathlib import Path

from implicit_em.windtunnel.config import preset
from implicit_em.windtunnel.run_dirs import run_dir, seeds_dir


def test_run_dir_names_a_run_by_its_fields_and_hash() -> None:
    config = preset("bijection", model="mlp-pos", objective="sigmoid", seed=3)
    assert run_dir(Path("out"), config, "default") == Path(
        "out/bijection-mlp-pos-sigmoid-default-s3-01fcf152"
    )


def test_run_dir_appends_the_tracing_period() -> None:
    assert run_dir(Path("out"), preset("hmm"), "paper", 100) == Path(
        "out/hmm-transformer-ce-paper-s0-37b6a4d5-trace100"
    )


def test_seeds_dir_names_the_seeds_and_ignores_the_seed_field() -> None:
    config = preset("bijection", model="mlp-pos", objective="sigmoid", seed=3)
    expected = Path("out/bijection-mlp-pos-sigmoid-default-seeds0-2-39c0472a")
    assert seeds_dir(Path("out"), config, "default", [0, 1, 2]) == expected
    assert (
        seeds_dir(
            Path("out"),
            preset("bijection", model="mlp-pos", objective="sigmoid"),
            "default",
            [0, 1, 2],
        )
        == expected
    )

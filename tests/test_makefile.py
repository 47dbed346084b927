"""`make setup` installs torch from the index `TORCH_INDEX` names, and from pip's own
configuration when it is empty (the default)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _torch_install(*variables: str) -> str:
    """The pip command `make setup` would run for torch (`make -n`: nothing runs)."""
    done = subprocess.run(
        ["make", "-n", "-B", "setup", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = [line for line in done.stdout.splitlines() if "torch==" in line]
    return " ".join(line.split())


def test_torch_comes_from_pip_configuration_by_default():
    assert _torch_install() == ".venv/bin/python -m pip install --quiet torch==2.13.0"


def test_torch_index_is_passed_to_pip():
    command = _torch_install("TORCH_INDEX=https://example.invalid/cpu")
    assert command == (
        ".venv/bin/python -m pip install --quiet --index-url https://example.invalid/cpu "
        "torch==2.13.0"
    )


@pytest.mark.parametrize("target", ["test", "test-fast"])
def test_the_tests_install_the_data_and_the_browser_they_need(target):
    """On a fresh machine `make test` alone sets up the venv, Fashion-MNIST and Chromium (`make
    -n`: the recipes are printed, nothing is installed)."""
    done = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "dataset-fashion-mnist" in done.stdout
    assert "browser" in done.stdout
    assert "pytest" in done.stdout


def test_ci_runs_make_test_and_the_checks_after_it():
    steps = [
        line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("make")
    ]
    assert steps[0] == "make test"
    assert "make data" not in steps and "make browser" not in steps

"""The commit recorded beside a report's numbers."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from implicit_em.report.running.provenance import source_commit

ROOT = Path(__file__).resolve().parents[2]


def test_the_commit_is_the_checkout_s_head_or_unknown(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert re.fullmatch(rf"{head}(\+modified)?", source_commit(ROOT))
    assert source_commit(tmp_path) == "unknown"  # not a checkout of the package

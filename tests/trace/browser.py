"""Headless Chromium for the page tests: the DOM after load, console messages, and a check
that a page loads with every section shown, every figure decoded and no console message."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium is not installed (Debian package `chromium`; `make browser`)",
)

_PROBE = """<script>window.addEventListener("load", () => {
  const b = document.body.dataset;
  b.images = [...document.images].map(i => i.complete ? i.naturalWidth : -1).join(",");
  b.sections = [...document.querySelectorAll("section")]
    .map(s => s.id + ":" + (s.getBoundingClientRect().height > 0 ? 1 : 0)).join(",");
});</script>"""
"""Appended to a copy of the page: records, once loaded, the width of every image (0 for an
image that failed to decode) and whether every section has a rendered height."""


def chromium(page: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The DOM of `page` after load in headless Chromium, and its console messages."""
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.stdout, console


def _probed(dom: str, name: str) -> str:
    match = re.search(rf'data-{name}="([^"]*)"', dom)
    assert match, f"the probe did not run (no data-{name} in the DOM)"
    return match.group(1)


def check_in_browser(page: Path, tmp_path: Path, sections: set[str]) -> None:
    dom, console = chromium(page, tmp_path)
    assert console == []
    widths = [int(w) for w in _probed(dom, "images").split(",")]
    assert widths and all(w > 100 for w in widths), widths
    shown = dict(s.split(":") for s in _probed(dom, "sections").split(","))
    assert set(shown) == sections
    assert all(v == "1" for v in shown.values()), shown

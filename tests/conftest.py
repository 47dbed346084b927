"""Suite-wide settings: no network, no display.

Models are built from configs and data are generated or shipped with installed packages, so the
suite must never reach a hub; figures are drawn with matplotlib's file-only Agg backend.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def torchrun() -> Callable[..., subprocess.CompletedProcess]:
    """Run ``script`` with ``args`` as 2 gloo processes under ``torchrun --standalone``.

    One intra-op thread per process (two processes share the machine's cores).
    """

    def launch(script: Path, *args: object, timeout: float) -> subprocess.CompletedProcess:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--standalone",
            str(script),
            *map(str, args),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)

    return launch


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

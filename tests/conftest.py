"""Suite-wide settings: no network, no display.

Models are built from configs and data are generated or shipped with installed packages, so the
suite must never reach a hub; figures are drawn with matplotlib's file-only Agg backend.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

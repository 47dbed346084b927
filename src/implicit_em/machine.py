"""The machine a figure was measured on: CPU model, instruction set, BLAS, threads, device.

Speed ratios differ by about 2x between machines of the same core count (AVX-512 against AVX2),
so every benchmark and report prints `describe` beside its figures.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np
import torch

__all__ = ["describe", "summary"]


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _instruction_set() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    flags: set[str] = set()
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return torch.backends.cpu.get_cpu_capability()


def _numpy_blas() -> str:
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            if pool.get("user_api") == "blas" and "numpy" in pool.get("filepath", ""):
                return f"{pool['internal_api']} {pool.get('version') or ''}".strip()
        blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if blas:
            return f"{blas[0]['internal_api']} {blas[0].get('version') or ''}".strip()
    except ImportError:
        pass
    return "unknown"


def _torch_blas() -> str:
    for part in torch.__config__.show().replace("\n", ",").split(","):
        if "BLAS_INFO=" in part:
            return part.split("BLAS_INFO=", 1)[1].strip()
    return "unknown"


def describe(device: str | torch.device = "cpu") -> dict[str, str | int]:
    """The machine as a dict: cpu, isa, cores, torch/numpy threads, BLAS of each, device."""
    device = torch.device(device)
    info: dict[str, str | int] = {
        "cpu": _cpu_model(),
        "isa": _instruction_set(),
        "cores": os.cpu_count() or 0,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torch_blas": _torch_blas(),
        "numpy": np.__version__,
        "numpy_blas": _numpy_blas(),
        "device": "cpu",
    }
    if device.type == "cuda" and torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(device)
    return info


def summary(device: str | torch.device = "cpu") -> str:
    """One line: `AMD EPYC (AVX2), 2 cores, torch 2.13.0 (2 threads, MKL), numpy BLAS ..., cpu`."""
    m = describe(device)
    return (
        f"{m['cpu']} ({m['isa']}), {m['cores']} cores, torch {m['torch']} "
        f"({m['torch_threads']} thread{'' if m['torch_threads'] == 1 else 's'}, BLAS {m['torch_blas']}), "
        f"numpy {m['numpy']} "
        f"(BLAS {m['numpy_blas']}), device {m['device']}"
    )

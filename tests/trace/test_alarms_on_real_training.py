"""The small version of `benchmarks/trace_healthy.py` (same code, fewer steps): GPT-2 built
from its config, byte-level language modelling on the standard library's source. The healthy
run raises no alarm; the run at an unstable rate raises one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

_SCRIPT = Path(__file__).parents[2] / "benchmarks" / "trace_healthy.py"


def _benchmark():
    spec = importlib.util.spec_from_file_location("trace_healthy", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    """The benchmark's module, run as the benchmark runs: on one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield _benchmark()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def text(bench):
    return bench.corpus()


def test_a_healthy_gpt2_run_raises_no_alarm(bench, text):
    run = bench.train("gpt2", bench.REGIMES["healthy"], 0, 150, text)
    assert run["losses"][-1] < run["losses"][0] - 1.0
    assert bench.replay(run["records"], bench.Thresholds()) == []


def test_a_gpt2_run_at_an_unstable_rate_raises_an_alarm(bench, text):
    run = bench.train("gpt2", bench.REGIMES["unstable"], 0, 60, text)
    alarms = bench.replay(run["records"], bench.Thresholds())
    assert {a["alarm"] for a in alarms} & {"attention_entropy_collapse", "attention_logit_growth"}

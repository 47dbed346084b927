"""A unit's record: its CPU seconds (its own threads and the worker processes it joined), the
machine line it ran on, and the units' folder that keeps them (old folders without them read)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import torch

from implicit_em.machine import summary
from implicit_em.report.rendering.render import time_cell
from implicit_em.report.rendering.units import units_line
from implicit_em.report.running.plan import Done, Unit, compute
from implicit_em.report.running.units import store, unit_summary

BUSY = (
    "import time\n"
    "end = time.process_time() + {seconds}\n"
    "while time.process_time() < end:\n"
    "    pass\n"
    "print(time.process_time())\n"
)
"""A child process that spins until it has used `seconds` of CPU and prints what it used."""


def busy_in_a_child(seconds: float) -> dict[str, float]:
    """Spin for `seconds` of CPU in a child process (waited for), and a tenth of it here."""
    child = subprocess.run(
        [sys.executable, "-c", BUSY.format(seconds=seconds)],
        capture_output=True,
        text=True,
        check=True,
    )
    end = time.process_time() + seconds / 10
    while time.process_time() < end:
        pass
    return {"child": float(child.stdout), "own": seconds / 10}


def test_a_unit_counts_the_cpu_of_the_child_processes_it_waited_for():
    done = compute(Unit("seed0", busy_in_a_child, {"seconds": 0.4}))
    assert done.error is None
    used = done.value["child"] + done.value["own"]
    assert done.value["child"] >= 0.4  # the child's own reading of its work
    # without the children's time the unit would read about `own` (0.04 s) alone
    assert done.cpu_seconds is not None and done.cpu_seconds >= 0.5 * used
    assert done.machine == summary("cpu")  # the line benchmarks print, threads included
    assert f"{torch.get_num_threads()} thread" in done.machine


def _done(name: str, seconds: float, cpu: float | None, machine: str | None) -> Done:
    return Done(name, 1.0, seconds, "node-a", "cpu", (), None, cpu, machine)


def test_the_units_folder_keeps_cpu_and_machine_and_reads_old_folders(tmp_path):
    old = tmp_path / "old"  # kept before CPU seconds and machine lines were recorded
    old.mkdir()
    (old / "seed0.json").write_text("1.0")
    (old / "_times.json").write_text(json.dumps({"seed0": 2.0, "seed1": 3.0}))
    (old / "_where.json").write_text(json.dumps({"seed0": {"host": "node-a", "device": "cpu"}}))
    before = unit_summary(old, resumed=2)
    assert before["cpu_seconds"] is None and before["cpu_hours"] is None
    assert before["cpu_units"] == 0 and before["machines"] == []
    assert before["each"] == {
        "seed0": {"seconds": 2.0, "host": "node-a", "device": "cpu"},
        "seed1": {"seconds": 3.0},
    }
    assert before["where"]["node-a (cpu)"]["cpu_seconds"] is None
    line = units_line(before)
    assert "CPU" not in line and "machine" not in line  # not measured: not shown, not 0
    assert "2 units of work, 5.0 s together" in line
    assert time_cell({"seconds": 6.0, "units": before}) == "6.0 s"

    store(old, _done("seed2", 4.0, 7.2, "machine A"))  # a later sitting resumes that folder
    store(old, _done("seed3", 1.0, 0.0, "machine B"))
    after = unit_summary(old, resumed=2)
    assert (after["cpu_units"], after["cpu_seconds"]) == (2, 7.2)
    assert after["cpu_hours"] == 7.2 / 3600 and after["machines"] == ["machine A", "machine B"]
    assert after["each"]["seed2"] == {
        "seconds": 4.0,
        "cpu_seconds": 7.2,
        "host": "node-a",
        "device": "cpu",
        "machine": 0,
    }
    assert after["each"]["seed3"]["cpu_seconds"] == 0.0  # measured: 0 is a reading here
    node = after["where"]["node-a (cpu)"]
    assert (node["units"], node["cpu_units"], node["cpu_seconds"]) == (3, 2, 7.2)
    assert node["machines"] == ["machine A", "machine B"]
    line = units_line(after)
    assert "4 units of work, 10.0 s together, CPU 7.2 s = 0.002 CPU-hours over 2 of 4 units" in line
    assert "node-a (cpu): 3 units, 7.0 s, CPU 7.2 s = 0.002 CPU-hours over 2 of 3 units" in line
    assert "machine machine A / machine B" in line
    assert time_cell({"seconds": 6.0, "units": after}) == "6.0 s (CPU 7.2 s, 2 of 4 units)"


def test_a_lost_unit_records_no_cpu_time(tmp_path):
    lost = Done("seed0", None, 0.0, "", "", (), "WorkerCrashedError: lost")  # as Ray gives it
    assert lost.cpu_seconds is None and lost.machine is None
    store(tmp_path, lost)
    summary_ = unit_summary(tmp_path, resumed=0)
    assert summary_["cpu_seconds"] is None and summary_["each"]["seed0"] == {
        "seconds": 0.0,
        "host": "",
        "device": "",
    }

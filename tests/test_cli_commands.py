"""The ``implicit-em`` command is consistent: ``--version``, help that lists the valid names and
shows flags as flags, lists given comma-separated or repeated, and the documented sequences run
as written."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from implicit_em import __version__, identities
from implicit_em.cli import app
from implicit_em.mixture.covariance import COVARIANCE_TYPES
from implicit_em.mixture.initialization import INIT_PARAMS
from implicit_em.mixture.step_rules import FITTERS
from implicit_em.report.running.registry import select


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"implicit-em {__version__}"


@pytest.mark.parametrize(
    ("command", "names"),
    [
        ("verify", list(identities.REGISTRY)),
        ("report", [e.id for e in select()]),
        ("fit", [*COVARIANCE_TYPES, *FITTERS, *INIT_PARAMS]),
        ("windtunnel", ["bijection", "hmm", "dice", "mlp-prefix", "reference-cpu"]),
        ("trace-demo", []),
    ],
)
def test_help_lists_the_valid_names_and_shows_flags_as_flags(command, names):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in names:
        assert name in result.stdout, name
    assert "<bool>" not in result.stdout


def test_verify_takes_a_list_comma_separated_or_repeated():
    runner = CliRunner()
    a = runner.invoke(app, ["verify", "--json", "--only", "lse_gradient,nll_gradient"])
    b = runner.invoke(app, ["verify", "--json", "--only", "lse_gradient", "--only", "nll_gradient"])
    assert a.exit_code == b.exit_code == 0
    assert a.stdout == b.stdout and "nll_gradient" in a.stdout


def test_fit_names_the_file_it_wrote(tmp_path):
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).normal(size=(50, 2)))
    result = CliRunner().invoke(app, ["fit", str(data), "--output", str(tmp_path / "gm")])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # off a terminal, no progress bar
    assert f"parameters written to {tmp_path / 'gm.npz'}" in result.stdout
    assert (tmp_path / "gm.npz").is_file()


def test_fit_passes_learning_rate_reg_covar_and_init(tmp_path):
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).normal(size=(50, 2)))
    runner = CliRunner()
    outputs = []
    for lr in ("0.05", "0.2"):
        args = ["fit", str(data), "--fitter", "adam", "--learning-rate", lr, "--max-iter", "3"]
        args += ["--reg-covar", "1e-3", "--init", "random", "--output", str(tmp_path / "gm")]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        outputs.append(np.load(tmp_path / "gm.npz")["means"])
    assert not np.allclose(outputs[0], outputs[1])


def _windtunnel(out, *args):
    base = ["windtunnel", "--quick", "--steps", "3", "--batch-size", "4", "--out", str(out)]
    return CliRunner().invoke(app, [*base, *args])


def test_documented_windtunnel_sequence_runs_as_written(tmp_path):
    """`windtunnel --quick`, then `windtunnel --quick --trace` (shortened to a few steps)."""
    plain = _windtunnel(tmp_path)
    assert plain.exit_code == 0, plain.output
    traced = _windtunnel(tmp_path, "--trace", "--trace-every", "1")
    assert traced.exit_code == 0, traced.output
    assert "attention drift" in traced.stdout
    directories = sorted(p.name for p in tmp_path.iterdir())
    assert len(directories) == 2 and directories[1] == directories[0] + "-trace1"


def test_a_planned_stop_at_the_time_budget_exits_0_and_says_how_to_resume(tmp_path):
    args = ["windtunnel", "--quick", "--steps", "100000", "--time-budget", "0.1"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "--time-budget is spent" in result.stdout
    assert "Rerun the same command to resume" in result.stdout

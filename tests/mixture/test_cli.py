"""``implicit-em fit``: fit, write parameters, predict from them."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from implicit_em.cli import app
from implicit_em.mixture.io import load


def test_fit_then_predict(tmp_path, blobs):
    data, csv = tmp_path / "x.npy", tmp_path / "x.csv"
    np.save(data, blobs)
    np.savetxt(csv, blobs, delimiter=",")
    params, labels = tmp_path / "gm.npz", tmp_path / "labels.npy"
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "fit",
            str(data),
            "--components",
            "4",
            "--covariance",
            "diag",
            "--fitter",
            "em",
            "--output",
            str(params),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "mean log-likelihood" in result.output and "BIC" in result.output
    gm = load(params)
    assert gm.covariances_.shape == (4, 3)
    result = runner.invoke(
        app, ["fit", str(csv), "--predict", str(params), "--labels", str(labels)]
    )
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(labels), gm.predict(blobs))


def test_bad_option_is_reported(tmp_path, blobs):
    data = tmp_path / "x.npy"
    np.save(data, blobs)
    result = CliRunner().invoke(app, ["fit", str(data), "--covariance", "banded"])
    assert result.exit_code != 0
    assert "--covariance" in result.output

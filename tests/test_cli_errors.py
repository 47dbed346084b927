"""Every ``implicit-em`` subcommand answers bad input with one line, ``error: ...``, on stderr and
a non-zero exit status: no traceback, no usage panel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from implicit_em.cli import app


def _files(tmp: Path) -> dict[str, Path]:
    """A good data file, and one of each bad kind, in ``tmp``."""
    rng = np.random.default_rng(0)
    good = tmp / "good.npy"
    np.save(good, rng.normal(size=(60, 2)))
    nan = tmp / "nan.csv"
    nan.write_text("1,2\n3,nan\n5,6\n")
    flat = tmp / "flat.npy"
    np.save(flat, np.arange(6.0))
    cube = tmp / "cube.npy"
    np.save(cube, np.zeros((4, 3, 2)))
    words = tmp / "words.csv"
    words.write_text("a,b\n1,2\nthree,4\n")
    regular = tmp / "regular-file"
    regular.write_text("not a folder")
    wrong_features = tmp / "three.npy"
    np.save(wrong_features, rng.normal(size=(60, 3)))
    params = tmp / "params.npz"
    text = tmp / "data.txt"
    text.write_text("1 2\n3 4\n")
    return {
        "good": good,
        "nan": nan,
        "flat": flat,
        "cube": cube,
        "words": words,
        "regular": regular,
        "unwritable": regular / "out",
        "three": wrong_features,
        "params": params,
        "missing": tmp / "missing.npy",
        "text": text,
    }


# subcommand -> [(case, arguments built from the files, what the error line must say)]
CASES = {
    "verify": [("unknown identity", lambda f: ["--only", "no-such-identity"], "--only")],
    "fit": [
        ("missing file", lambda f: [str(f["missing"])], "no such file"),
        ("not npy or csv", lambda f: [str(f["text"])], "expected a .npy or .csv"),
        ("NaN", lambda f: [str(f["nan"]), "-k", "1"], "NaN"),
        ("1-D array", lambda f: [str(f["flat"])], "2-D"),
        ("3-D array", lambda f: [str(f["cube"])], "2-D"),
        ("a word past the header", lambda f: [str(f["words"])], "three"),
        (
            "unwritable output",
            lambda f: [str(f["good"]), "--output", str(f["unwritable"])],
            "--output",
        ),
        (
            "output is a folder",
            lambda f: [str(f["good"]), "--output", str(f["regular"].parent)],
            "--output",
        ),
        (
            "bad option value",
            lambda f: [str(f["good"]), "--covariance", "banded"],
            "covariance_type",
        ),
        (
            "too many components",
            lambda f: [str(f["good"]), "-k", "100"],
            "n_samples >= n_components",
        ),
        (
            "missing parameters",
            lambda f: [str(f["good"]), "--predict", str(f["missing"])],
            "--predict",
        ),
        (
            "not a parameters file",
            lambda f: [str(f["good"]), "--predict", str(f["good"])],
            "--predict",
        ),
        (
            "wrong feature count",
            lambda f: [str(f["three"]), "--predict", str(f["params"])],
            "features",
        ),
        (
            "unwritable labels",
            lambda f: [
                str(f["good"]),
                "--predict",
                str(f["params"]),
                "--labels",
                str(f["unwritable"]),
            ],
            "--labels",
        ),
    ],
    "trace-demo": [("unwritable output", lambda f: ["--out", str(f["unwritable"])], "--out")],
    "trace": [
        ("missing run", lambda f: ["report", str(f["missing"])], "cannot be read"),
        ("not a run", lambda f: ["report", str(f["text"])], "data.txt:1: not a JSON record"),
    ],
    "windtunnel": [
        ("unwritable output", lambda f: ["--quick", "--out", str(f["unwritable"])], "--out")
    ],
    "report": [
        ("unwritable output", lambda f: ["--smoke", "--out", str(f["unwritable"])], "--out"),
        (
            "unknown experiment",
            lambda f: ["--smoke", "--only", "E999", "--out", str(f["regular"].parent / "r")],
            "E999",
        ),
    ],
}


def test_every_subcommand_has_bad_input_cases():
    assert set(get_command(app).commands) == set(CASES)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("cli")
    files = _files(tmp)
    result = CliRunner().invoke(
        app, ["fit", str(files["good"]), "-k", "2", "--output", str(files["params"])]
    )
    assert result.exit_code == 0, result.output
    return files


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        pytest.param(command, args, expected, id=f"{command}: {case}")
        for command, cases in CASES.items()
        for case, args, expected in cases
    ],
)
def test_bad_input_is_one_error_line_and_a_non_zero_exit(files, command, args, expected):
    result = CliRunner().invoke(app, [command, *args(files)])
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and expected in line, line


def test_a_csv_header_row_is_skipped(tmp_path):
    x = np.random.default_rng(1).normal(size=(40, 2))
    with_header, plain = tmp_path / "with.csv", tmp_path / "plain.csv"
    np.savetxt(with_header, x, delimiter=",", header="a,b", comments="")
    np.savetxt(plain, x, delimiter=",")
    runner = CliRunner()
    outputs = []
    for path, flag in ((with_header, []), (plain, []), (with_header, ["--header"])):
        params = tmp_path / f"{path.stem}{len(flag)}.npz"
        result = runner.invoke(app, ["fit", str(path), *flag, "--output", str(params)])
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout.splitlines()[-2])  # the BIC line
    assert outputs[0] == outputs[1] == outputs[2]
    result = runner.invoke(
        app, ["fit", str(plain), "--header", "--output", str(tmp_path / "h.npz")]
    )
    assert result.exit_code == 0  # --header drops the first row even when it is numbers
    assert result.stdout.splitlines()[-2] != outputs[1]

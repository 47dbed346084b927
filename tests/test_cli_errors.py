"""Every ``implicit-em`` subcommand answers bad input with one line, ``error: ...``, on stderr and
exit status 2, before any work starts: no traceback, no usage panel, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from implicit_em.arguments import check_device
from implicit_em.cli import app
from implicit_em.mixture.cli import read_data
from implicit_em.windtunnel.run_dirs import run_dir
from implicit_em.windtunnel.train import RESULT, preset

_TEXT_FILES = {
    "text_first": ("text-first.csv", "x,1\n2,3\n4,5\n"),  # no header: its first row mixes
    "semicolons": ("semicolons.csv", "1;2\n3;4\n"),
    "tabs": ("tabs.csv", "a\tb\n1\t2\n3\t4\n"),
    "ragged": ("ragged.csv", "a,b\n1,2\n3,4,5\n"),
    "empty_cell": ("empty-cell.csv", "1,2\n3,\n"),
    "not_npz": ("not-parameters.npz", "hello"),
}
"""Bad data and parameter files written as text: key -> (file name, content)."""


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
    empty = tmp / "empty.csv"
    empty.write_text("")
    empty_npy = tmp / "empty.npy"
    empty_npy.write_bytes(b"")
    objects = tmp / "objects.npy"
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    texts = {key: tmp / name for key, (name, _) in _TEXT_FILES.items()}
    for key, path in texts.items():
        path.write_text(_TEXT_FILES[key][1])
    objects_npz = tmp / "objects.npz"
    np.savez(objects_npz, covariance_type=np.array([{"a": 1}], dtype=object))
    folder = tmp / "folder.npy"
    folder.mkdir()
    # A finished untraced run in the directory a traced run of `windtunnel --quick` would use.
    untraced = tmp / "untraced"
    config = replace(preset("bijection", "quick", seed=0, sdpa=True), model="transformer")
    directory = run_dir(untraced, config, "quick", 100)
    directory.mkdir(parents=True)
    (directory / RESULT).write_text(json.dumps({"config": {}}))
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
        "empty": empty,
        "empty_npy": empty_npy,
        "objects": objects,
        **texts,
        "objects_npz": objects_npz,
        "folder": folder,
        "untraced": untraced,
    }


def _predicting(case: str, parameters: str, expected: str) -> tuple:
    """A `fit DATA --predict PARAMETERS` case whose parameters file is the file `parameters`."""
    return (case, lambda f: [str(f["good"]), "--predict", str(f[parameters])], expected)


# subcommand -> [(case, arguments built from the files, what the error line must say)]
CASES = {
    "verify": [
        ("unknown identity", lambda f: ["--only", "no-such-identity"], "--only"),
        ("unknown identity in a list", lambda f: ["--only", "lse_gradient,nope"], "nope"),
        ("seed not a number", lambda f: ["--seed", "x"], "--seed"),
        ("negative seed", lambda f: ["--seed", "-1"], "--seed: expected a value >= 0"),
        ("empty selection", lambda f: ["--only", ""], "--only '': no name given"),
        ("selection of commas", lambda f: ["--only", ",,"], "--only ',,': no name given"),
        ("unknown option", lambda f: ["--bogus"], "--bogus"),
    ],
    "fit": [
        ("missing file", lambda f: [str(f["missing"])], "no such file"),
        ("folder as data", lambda f: [str(f["folder"])], "is a folder"),
        ("empty csv", lambda f: [str(f["empty"])], "no data"),
        ("no data argument", lambda f: [], "DATA"),
        ("zero passes", lambda f: [str(f["good"]), "--max-iter", "0"], "--max-iter"),
        ("components not a number", lambda f: [str(f["good"]), "-k", "x"], "--components"),
        ("zero components", lambda f: [str(f["good"]), "-k", "0"], "--components"),
        ("negative tolerance", lambda f: [str(f["good"]), "--tol", "-1"], "--tol"),
        ("negative reg_covar", lambda f: [str(f["good"]), "--reg-covar", "-1"], "--reg-covar"),
        (
            "zero learning rate",
            lambda f: [str(f["good"]), "--fitter", "adam", "--learning-rate", "0"],
            "--learning-rate",
        ),
        ("unknown init", lambda f: [str(f["good"]), "--init", "nope"], "--init"),
        ("unknown fitter", lambda f: [str(f["good"]), "--fitter", "nope"], "--fitter"),
        ("unknown dtype", lambda f: [str(f["good"]), "--dtype", "float16"], "--dtype"),
        ("negative seed", lambda f: [str(f["good"]), "--seed", "-1"], "--seed"),
        ("zero batch size", lambda f: [str(f["good"]), "--batch-size", "0"], "--batch-size"),
        ("not npy or csv", lambda f: [str(f["text"])], "expected a .npy or .csv"),
        ("NaN", lambda f: [str(f["nan"]), "-k", "1"], "NaN"),
        ("1-D array", lambda f: [str(f["flat"])], "2-D"),
        ("3-D array", lambda f: [str(f["cube"])], "2-D"),
        ("a word past the header", lambda f: [str(f["words"])], "line 3, column 1: 'three'"),
        ("empty npy", lambda f: [str(f["empty_npy"])], "not a NumPy .npy file (the file is empty)"),
        ("pickled npy", lambda f: [str(f["objects"])], "holds Python objects"),
        (
            "text in a first row of numbers",
            lambda f: [str(f["text_first"])],
            "line 1, column 1: 'x' is not a number",
        ),
        ("semicolons", lambda f: [str(f["semicolons"])], "line 1 is separated by semicolons"),
        ("tabs", lambda f: [str(f["tabs"])], "line 2 is separated by tabs"),
        ("ragged rows", lambda f: [str(f["ragged"])], "line 3 has 3 columns, but line 2 has 2"),
        ("empty cell", lambda f: [str(f["empty_cell"])], "line 2, column 2: the cell is empty"),
        (
            "learning rate of a fitter that takes none",
            lambda f: [str(f["good"]), "--learning-rate", "0.1", "--fitter", "em"],
            "--fitter em takes none",
        ),
        ("labels without predict", lambda f: [str(f["good"]), "--labels", "l.npy"], "--predict"),
        (
            "covariance not one of the types",
            lambda f: [str(f["good"]), "--covariance", "foo"],
            "--covariance: 'foo' is not one of 'full', 'tied', 'diag', 'spherical'",
        ),
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
            "--covariance",
        ),
        ("too many components", lambda f: [str(f["good"]), "-k", "100"], "--components"),
        _predicting("missing parameters", "missing", "--predict"),
        _predicting("not a parameters file", "good", "--predict"),
        _predicting("parameters file that is no archive", "not_npz", "not an .npz archive"),
        _predicting("parameters file of Python objects", "objects_npz", "--predict"),
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
    "trace-demo": [
        ("unwritable output", lambda f: ["--out", str(f["unwritable"])], "--out"),
        ("zero epochs", lambda f: ["--epochs", "0"], "--epochs"),
        ("zero period", lambda f: ["--every", "0"], "--every: expected a value >= 1"),
    ],
    "trace": [
        ("missing run", lambda f: ["report", str(f["missing"])], "cannot be read"),
        ("not a run", lambda f: ["report", str(f["text"])], "data.txt:1: not a JSON record"),
    ],
    "windtunnel": [
        ("unwritable output", lambda f: ["--quick", "--out", str(f["unwritable"])], "--out"),
        ("output is a file", lambda f: ["--quick", "--out", str(f["good"])], "--out"),
        ("device that is no device", lambda f: ["--quick", "--device", "gpu"], "--device"),
        ("absent CUDA device", lambda f: ["--quick", "--device", "cuda:99"], "--device"),
        ("negative learning rate", lambda f: ["--quick", "--lr", "-1"], "--lr"),
        ("zero learning rate", lambda f: ["--quick", "--lr", "0"], "--lr"),
        ("quick and a scale", lambda f: ["--quick", "--scale", "paper"], "--scale"),
        ("zero steps", lambda f: ["--quick", "--steps", "0"], "--steps"),
        ("zero threads", lambda f: ["--quick", "--threads", "0"], "--threads"),
        ("zero time budget", lambda f: ["--quick", "--time-budget", "0"], "--time-budget"),
        ("unknown task", lambda f: ["--task", "nope"], "--task"),
        ("negative seed", lambda f: ["--quick", "--seed", "-1"], "--seed: expected a value >= 0"),
        ("second CPU", lambda f: ["--quick", "--device", "cpu:1"], "--device cpu:1"),
        ("too many pairs", lambda f: ["--quick", "--n-pairs", "99"], "--n-pairs"),
        (
            "trace without attention",
            lambda f: ["--quick", "--model", "mlp-pos", "--trace"],
            "--trace",
        ),
        (
            "trace against an untraced run",
            lambda f: ["--quick", "--trace", "--out", str(f["untraced"])],
            "--trace",
        ),
    ],
    "publish": [
        ("no source", lambda f: [], "--from"),
        ("missing source", lambda f: ["--from", str(f["missing"])], "--from"),
        ("source not a report", lambda f: ["--from", str(f["folder"])], "no results.json"),
        (
            "unwritable destination",
            lambda f: ["--from", str(f["folder"]), "--to", str(f["unwritable"])],
            "--to",
        ),
    ],
    "register": [
        (
            "seeds seen that are not numbers",
            lambda f: ["--after-data", "--seen", "x", "--seeds-seen", "a,b"],
            "--seeds-seen",
        ),
        ("an amendment after data without what was seen", lambda f: ["--after-data"], "--seen"),
    ],
    "report": [
        ("unwritable output", lambda f: ["--smoke", "--out", str(f["unwritable"])], "--out"),
        ("unknown experiment", lambda f: ["--smoke", "--only", "E999"], "E999"),
        ("unknown experiment in a list", lambda f: ["--smoke", "--only", "E2,E999"], "E999"),
        ("selection of commas", lambda f: ["--smoke", "--only", ",,"], "no name given"),
        ("two sizes", lambda f: ["--smoke", "--quick"], "--quick"),
        ("device that is no device", lambda f: ["--smoke", "--device", "gpu"], "--device"),
        ("absent CUDA device", lambda f: ["--smoke", "--device", "cuda:99"], "--device"),
        ("unknown executor", lambda f: ["--smoke", "--executor", "dask"], "--executor"),
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
def test_bad_input_is_one_error_line_exit_2_and_nothing_started(
    files, tmp_path, monkeypatch, command, args, expected
):
    monkeypatch.chdir(tmp_path)  # where the default outputs would go
    before = sorted(files["good"].parent.rglob("*"))
    result = CliRunner().invoke(app, [command, *args(files)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and expected in line, line
    for parser_wording in ("Value error", "Input should", "usecols", "allow_pickle"):
        assert parser_wording not in line
    assert result.stdout == ""
    assert not any(tmp_path.iterdir())
    assert sorted(files["good"].parent.rglob("*")) == before


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


def _without(modules: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`implicit-em ARGS` in a fresh interpreter where `modules` cannot be imported (as if their
    packages were not installed: `sys.modules[name] = None` makes every import of it fail)."""
    code = (
        "import sys\n"
        f"for name in {modules!r}:\n"
        "    sys.modules[name] = None\n"
        "from implicit_em.cli import main\n"
        f"sys.argv = ['implicit-em', *{args!r}]\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=600
    )


@pytest.mark.parametrize(
    ("modules", "args", "extra"),
    [
        (["matplotlib"], ["report", "--smoke", "--only", "E1"], "report"),
        (["ray"], ["report", "--smoke", "--only", "E1", "--executor", "ray"], "ray"),
        (["matplotlib"], ["windtunnel", "--quick"], "plot"),
        (["tensorboard"], ["trace-demo"], "trace"),
        (["matplotlib"], ["trace-demo"], "trace"),
        (["matplotlib"], ["trace", "report", "run.jsonl"], "trace"),
    ],
    ids=[
        "report",
        "report on ray",
        "windtunnel",
        "trace-demo without tensorboard",
        "trace-demo",
        "trace report",
    ],
)
def test_a_missing_optional_extra_is_one_line_naming_the_install(tmp_path, modules, args, extra):
    done = _without(modules, args, tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and modules[0] in line
    assert line.endswith(f"pip install 'implicit-em[{extra}]'"), line
    assert done.stdout == "" and not any(tmp_path.iterdir())  # nothing started


def test_help_summaries_are_whole_and_usage_names_arguments():
    runner = CliRunner()
    listing = runner.invoke(app, ["--help"], terminal_width=80).stdout
    commands = listing.split("Commands:")[1].strip().splitlines()
    assert len(commands) == len(CASES) and not any(line.endswith("...") for line in commands)
    fit = runner.invoke(app, ["fit", "--help"]).stdout
    assert "[OPTIONS] DATA" in fit.splitlines()[0]
    page = runner.invoke(app, ["trace", "report", "--help"]).stdout
    assert "[OPTIONS] RUN" in page.splitlines()[0]


def test_cpu_0_is_the_cpu():
    assert check_device("cpu:0") == check_device("cpu") == "cpu"


def test_a_csv_header_is_a_first_row_with_no_number(tmp_path):
    headed = tmp_path / "headed.csv"
    headed.write_text("\n# a comment\nwidth,height\n1,2\n3,4\n")
    assert read_data(headed).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    plain = tmp_path / "plain.csv"
    plain.write_text("1,2\n3,4\n")
    assert read_data(plain).shape == (2, 2)
    assert read_data(plain, header=True).shape == (1, 2)

"""`implicit-em fit`: fit a Gaussian mixture to a `.npy`/`.csv` file, or predict with one.

Every argument is checked before the fit starts. A user error (a missing or unreadable file, a
non-numeric cell, NaN, a wrong shape, an output that cannot be written, an invalid option) is
one line on stderr, `error: ...` naming the option or the file, and exit status 2; never a
traceback.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import numpy as np
import typer
from tqdm import tqdm

from implicit_em.arguments import SEED_RANGE, check_writable_file, fail
from implicit_em.mixture.covariance import COVARIANCE_TYPES
from implicit_em.mixture.estimator import GaussianMixture
from implicit_em.mixture.initialization import INIT_PARAMS
from implicit_em.mixture.io import load, save
from implicit_em.mixture.step_rules import FITTERS

__all__ = ["fit_command", "read_data"]


class DataError(ValueError):
    """A data file that cannot be used, with a message naming it."""


Covariance = StrEnum("Covariance", {name: name for name in COVARIANCE_TYPES})
Fitter = StrEnum("Fitter", {name: name for name in FITTERS})
Init = StrEnum("Init", {name: name for name in INIT_PARAMS})
DType = StrEnum("DType", {name: name for name in ("float64", "float32")})


_OTHER_DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "vertical bars", " ": "spaces"}


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Each row of a CSV file with its line number (1-based, as an editor shows it) and its
    comma-separated cells, stripped; blank lines and `#` comments are skipped, as `np.loadtxt`
    skips them."""
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            text = line.split("#", 1)[0].strip()
            if text:
                yield number, [cell.strip() for cell in text.split(",")]


def _other_delimiter(cells: list[str]) -> str | None:
    """The delimiter other than a comma that splits a one-cell row into numbers, if any."""
    if len(cells) != 1:
        return None
    for delimiter in _OTHER_DELIMITERS:
        parts = cells[0].split(None if delimiter == " " else delimiter)
        if len(parts) > 1 and all(_is_number(part) for part in parts):
            return delimiter
    return None


def _csv_problem(path: Path, skip_first: bool) -> str | None:
    """The first thing in the file that is not a comma-separated number, named by line and
    column as the file counts them (from 1); None when every row is numbers of one width."""
    width: tuple[int, int] | None = None
    for index, (line, cells) in enumerate(_csv_rows(path)):
        if index == 0 and skip_first:
            continue
        delimiter = _other_delimiter(cells)
        if delimiter is not None:
            return (
                f"line {line} is separated by {_OTHER_DELIMITERS[delimiter]}; expected "
                "comma-separated numbers (save the file with commas)"
            )
        for column, cell in enumerate(cells, start=1):
            if not _is_number(cell):
                what = "the cell is empty" if not cell else f"{cell!r} is not a number"
                return f"line {line}, column {column}: {what}"
        if width is None:
            width = (line, len(cells))
        elif len(cells) != width[1]:
            return (
                f"line {line} has {len(cells)} columns, but line {width[0]} has {width[1]}; "
                "every row needs the same number of columns"
            )
    return None


def _read_csv(path: Path, header: bool | None) -> np.ndarray:
    """Comma-separated numbers. A header is a first row with no number in it (and not numbers
    split by another delimiter): skipped when `header` is None; a first row that mixes numbers and text is data, and its text cell is
    the error."""
    first = next(_csv_rows(path), None)
    if first is None:
        raise DataError(f"{path}: no data rows")
    if header is None:
        header = _other_delimiter(first[1]) is None and not any(map(_is_number, first[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # loadtxt's "input contained no data"
        try:
            data = np.loadtxt(path, delimiter=",", ndmin=2, skiprows=first[0] if header else 0)
        except ValueError as err:
            raise DataError(f"{path}: {_csv_problem(path, header) or err}") from None
    if data.size == 0:
        raise DataError(f"{path}: no data rows")
    return data


def _read_npy(path: Path) -> np.ndarray:
    """The array in a `.npy` file; never unpickled."""
    with path.open("rb") as f:
        magic = f.read(6)
    if magic != b"\x93NUMPY":
        empty = " (the file is empty)" if not magic else ""
        raise DataError(f"{path}: not a NumPy .npy file{empty}")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:
        if "pickle" in str(err):
            raise DataError(f"{path}: holds Python objects, not an array of numbers") from None
        raise DataError(f"{path}: a damaged .npy file ({err})") from None
    except EOFError:
        raise DataError(f"{path}: a truncated .npy file") from None


def read_data(path: Path, header: bool | None = None) -> np.ndarray:
    """A 2-D float array (float32 stays float32) from `.npy` or `.csv`.

    CSV: comma-separated numbers, one row per line; `header` None detects a header row (a
    first row with no number in it) and skips it, True always skips the first row, False
    never does. `DataError` names the file and what is wrong with it, by line and column
    counted from 1 as in the file.
    """
    if path.is_dir():
        raise DataError(f"{path}: is a folder, expected a .npy or .csv file")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        if path.suffix == ".npy":
            data = _read_npy(path)
        elif path.suffix == ".csv":
            data = _read_csv(path, header)
        else:
            raise DataError(f"{path}: expected a .npy or .csv file")
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror or err})") from None
    if data.ndim != 2 or 0 in data.shape:
        raise DataError(f"{path}: expected a 2-D array (rows x features), got shape {data.shape}")
    if not np.issubdtype(data.dtype, np.number) or np.issubdtype(data.dtype, np.complexfloating):
        raise DataError(f"{path}: expected real numbers, got dtype {data.dtype}")
    data = data if data.dtype == np.float32 else data.astype(np.float64)
    if not np.isfinite(data).all():
        row = int(np.flatnonzero(~np.isfinite(data).all(axis=1))[0])
        raise DataError(f"{path}: contains NaN or infinity (row {row + 1} of the data)")
    return data


def npz_path(path: Path) -> Path:
    """The file `np.savez` writes for `path`: `.npz` is appended unless the name has it."""
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def _predict(x: np.ndarray, data: Path, parameters: Path, labels: Path | None) -> None:
    try:
        gm = load(parameters)
    except ValueError as err:
        fail(f"--predict {parameters}: not a parameters file written by implicit-em fit ({err})")
    if x.shape[1] != gm.n_features_in_:
        fail(
            f"DATA {data} has {x.shape[1]} features, but the parameters in --predict "
            f"{parameters} are for {gm.n_features_in_} features"
        )
    y = gm.predict(x)
    score = gm.score(x)
    if labels is not None:
        try:
            np.save(labels, y)
        except OSError as err:
            fail(f"--labels {labels}: {err}")
    counts = np.bincount(y, minlength=gm.n_components)
    typer.echo(f"mean log-likelihood: {score:.6f}")
    typer.echo("component sizes: " + " ".join(str(c) for c in counts))
    if labels is not None:
        typer.echo(f"labels written to {labels}")


def fit_command(
    data: Path = typer.Argument(
        ..., metavar="DATA", help="DATA.npy or DATA.csv (a header row is skipped)."
    ),
    components: int = typer.Option(2, "--components", "-k", min=1, help="Number of components K."),
    covariance: Covariance = typer.Option(Covariance.full, help="The covariance type."),
    fitter: Fitter = typer.Option(Fitter.em, help="The step rule."),
    init: Init = typer.Option(Init.kmeans, help="How the initial responsibilities are computed."),
    max_iter: int = typer.Option(100, min=1, help="Maximum passes over the data."),
    tol: float = typer.Option(1e-3, min=0.0, help="Tolerance on the mean log-likelihood change."),
    reg_covar: float = typer.Option(
        1e-6, min=0.0, help="Added to the diagonal of every covariance."
    ),
    learning_rate: float = typer.Option(
        None, help="Step size of gd (default 1.0) and adam (default 0.1); > 0."
    ),
    batch_size: int = typer.Option(None, min=1, help="Rows per streamed chunk (default: all)."),
    dtype: DType = typer.Option(None, help="The floating type of the fit (default: the data's)."),
    seed: int = typer.Option(0, **SEED_RANGE, help="Random seed of the initialization."),
    header: bool = typer.Option(
        None, "--header/--no-header", help="CSV: skip the first line or not (default: detect)."
    ),
    output: Path = typer.Option(
        Path("mixture.npz"),
        metavar="PATH",
        help="Where to write the parameters (.npz is appended if missing).",
    ),
    predict: Path = typer.Option(
        None, metavar="PATH", help="Instead of fitting, load these parameters and label DATA."
    ),
    labels: Path = typer.Option(
        None, metavar="PATH", help="With --predict: write the labels here (.npy)."
    ),
) -> None:
    """Fit a Gaussian mixture (progress bar, final log-likelihood, BIC), or predict with one."""
    if learning_rate is not None and not (math.isfinite(learning_rate) and learning_rate > 0):
        fail(f"--learning-rate must be a finite number > 0, got {learning_rate}")
    if learning_rate is not None and fitter.value not in ("gd", "adam"):
        fail(
            f"--learning-rate is a step size of --fitter gd and adam; --fitter {fitter.value} "
            "takes none (leave --learning-rate out, or choose gd or adam)"
        )
    if predict is not None and not predict.is_file():
        fail(f"--predict {predict}: no such file")
    if labels is not None and predict is None:
        fail("--labels: labels are written by a prediction; give --predict PARAMETERS.npz too")
    if predict is not None and labels is not None:
        check_writable_file(labels, "--labels")
    if predict is None:
        if output.is_dir():
            fail(f"--output {output}: is a folder, expected a file path")
        output = npz_path(output)
        check_writable_file(output, "--output")
    try:
        x = read_data(data, header)
    except DataError as err:
        fail(f"DATA {err}")
    if predict is not None:
        _predict(x, data, predict, labels)
        return
    if components > x.shape[0]:
        fail(f"--components {components}: more than the {x.shape[0]} rows of DATA {data}")
    gm = GaussianMixture(
        components,
        covariance_type=covariance.value,
        fitter=fitter.value,
        init_params=init.value,
        max_iter=max_iter,
        tol=tol,
        reg_covar=reg_covar,
        learning_rate=learning_rate,
        batch_size=batch_size,
        dtype=None if dtype is None else dtype.value,
        random_state=seed,
    )
    bars: list[tqdm] = []  # opened at the first pass

    def progress(n_iter: int, log_likelihood: float) -> None:
        if not bars:
            bars.append(  # drawn on a terminal only (disable=None)
                tqdm(
                    total=max_iter,
                    desc=f"{fitter.value} ({covariance.value})",
                    unit="pass",
                    disable=None,
                )
            )
        bars[0].update(1)
        bars[0].set_postfix(log_likelihood=f"{log_likelihood:.5f}")

    try:
        gm.fit(x, callback=progress)
    except ValueError as err:
        fail(str(err))
    finally:
        for bar in bars:
            bar.close()
    try:
        save(gm, output)
    except OSError as err:
        fail(f"--output {output}: {err}")
    typer.echo(f"converged: {gm.converged_} after {gm.n_iter_} passes")
    typer.echo(f"mean log-likelihood: {gm.score(x):.6f}")
    typer.echo(f"BIC: {gm.bic(x):.3f}")
    typer.echo(f"parameters written to {output}")

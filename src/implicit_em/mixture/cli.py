"""`implicit-em fit`: fit a Gaussian mixture to a `.npy`/`.csv` file, or predict with one.

Every argument is checked before the fit starts. A user error (a missing or unreadable file, a
non-numeric cell, NaN, a wrong shape, an output that cannot be written, an invalid option) is
one line on stderr, `error: ...` naming the option or the file, and exit status 2; never a
traceback.
"""

from __future__ import annotations

import math
import warnings
from enum import StrEnum
from pathlib import Path

import numpy as np
import typer
from tqdm import tqdm

from implicit_em.arguments import check_writable_file, fail, warn
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


def _is_numbers(line: str) -> bool:
    try:
        [float(cell) for cell in line.split(",")]
    except ValueError:
        return False
    return True


def _read_csv(path: Path, header: bool | None) -> np.ndarray:
    """Comma-separated numbers; a first line that is not all numbers is a header (skipped) when
    `header` is None."""
    with path.open() as f:
        first = next((line for line in f if line.strip()), "")
    if header is None:
        header = bool(first) and not _is_numbers(first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # loadtxt's "input contained no data"
        try:
            data = np.loadtxt(path, delimiter=",", ndmin=2, skiprows=int(header))
        except ValueError as err:
            raise DataError(f"{path}: {err}") from None
    if data.size == 0:
        raise DataError(f"{path}: no data rows")
    return data


def read_data(path: Path, header: bool | None = None) -> np.ndarray:
    """A 2-D float array (float32 stays float32) from `.npy` or `.csv`.

    CSV: comma-separated numbers, one row per line; `header` None detects a header row (a
    first line that is not all numbers) and skips it, True always skips the first line, False
    never does. `DataError` names the file and what is wrong with it.
    """
    if path.is_dir():
        raise DataError(f"{path}: is a folder, expected a .npy or .csv file")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        if path.suffix == ".npy":
            data = np.load(path, allow_pickle=False)
        elif path.suffix == ".csv":
            data = _read_csv(path, header)
        else:
            raise DataError(f"{path}: expected a .npy or .csv file")
    except (OSError, ValueError) as err:
        raise DataError(err if isinstance(err, DataError) else f"{path}: {err}") from None
    if data.ndim != 2 or 0 in data.shape:
        raise DataError(f"{path}: expected a 2-D array (rows x features), got shape {data.shape}")
    if not np.issubdtype(data.dtype, np.number) or np.issubdtype(data.dtype, np.complexfloating):
        raise DataError(f"{path}: expected real numbers, got dtype {data.dtype}")
    data = data if data.dtype == np.float32 else data.astype(np.float64)
    if not np.isfinite(data).all():
        row = int(np.flatnonzero(~np.isfinite(data).all(axis=1))[0])
        raise DataError(f"{path}: contains NaN or infinity (row {row})")
    return data


def npz_path(path: Path) -> Path:
    """The file `np.savez` writes for `path`: `.npz` is appended unless the name has it."""
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def _predict(x: np.ndarray, data: Path, parameters: Path, labels: Path | None) -> None:
    try:
        gm = load(parameters)
    except (OSError, ValueError, KeyError) as err:
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
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Random seed of the initialization."),
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
        warn(f"--learning-rate is used by --fitter gd and adam only; ignored by {fitter.value}")
    if predict is not None and not predict.is_file():
        fail(f"--predict {predict}: no such file")
    if labels is not None and predict is None:
        warn("--labels is written only with --predict; ignored")
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
            bars.append(
                tqdm(total=max_iter, desc=f"{fitter.value} ({covariance.value})", unit="pass")
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

"""`implicit-em fit`: fit a Gaussian mixture to a `.npy`/`.csv` file, or predict with one.

A user error (a missing or unreadable file, a non-numeric cell, NaN, a wrong shape, an output
that cannot be written, an invalid option) is one line on stderr, `error: ...`, and exit
status 2; never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import numpy as np
import typer
from tqdm import tqdm

from implicit_em.mixture.estimator import GaussianMixture
from implicit_em.mixture.io import load, save

__all__ = ["fit_command", "read_data"]


class DataError(ValueError):
    """A data file that cannot be used, with a message naming it."""


def _fail(message: str) -> NoReturn:
    typer.echo("error: " + " ".join(message.split()), err=True)
    raise typer.Exit(code=2)


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
    try:
        data = np.loadtxt(path, delimiter=",", ndmin=2, skiprows=int(header))
    except ValueError as err:
        raise DataError(f"{path}: {err}") from None
    return data


def read_data(path: Path, header: bool | None = None) -> np.ndarray:
    """A 2-D float array (float32 stays float32) from `.npy` or `.csv`.

    CSV: comma-separated numbers, one row per line; `header` None detects a header row (a
    first line that is not all numbers) and skips it, True always skips the first line, False
    never does. `DataError` names the file and what is wrong with it.
    """
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
    if not np.issubdtype(data.dtype, np.number):
        raise DataError(f"{path}: expected numbers, got dtype {data.dtype}")
    return data if data.dtype == np.float32 else data.astype(np.float64)


def _check_writable(path: Path, option: str) -> None:
    folder = path.parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        _fail(f"{option} {path}: not a writable file path")


def _predict(x: np.ndarray, parameters: Path, labels: Path | None) -> None:
    if labels is not None:
        _check_writable(labels, "--labels")
    try:
        gm = load(parameters)
    except (OSError, ValueError, KeyError) as err:
        _fail(f"--predict {parameters}: not a parameters file written by implicit-em fit ({err})")
    try:
        y = gm.predict(x)
        score = gm.score(x)
    except ValueError as err:
        _fail(f"--predict {parameters}: {err}")
    if labels is not None:
        try:
            np.save(labels, y)
        except OSError as err:
            _fail(f"--labels {labels}: {err}")
    counts = np.bincount(y, minlength=gm.n_components)
    typer.echo(f"mean log-likelihood: {score:.6f}")
    typer.echo("component sizes: " + " ".join(str(c) for c in counts))


def fit_command(
    data: Path = typer.Argument(..., help="DATA.npy or DATA.csv (a header row is skipped)."),
    components: int = typer.Option(2, "--components", "-k", help="Number of components K."),
    covariance: str = typer.Option("full", help="full | tied | diag | spherical"),
    fitter: str = typer.Option("em", help="em | gd | adam | preconditioned"),
    max_iter: int = typer.Option(100, help="Maximum passes over the data."),
    tol: float = typer.Option(1e-3, help="Tolerance on the mean log-likelihood change."),
    batch_size: int = typer.Option(None, help="Rows per streamed chunk (default: all)."),
    dtype: str = typer.Option(None, help="float64 | float32 (default: the data's)."),
    seed: int = typer.Option(0, help="Random seed of the initialization."),
    header: bool = typer.Option(
        None, "--header/--no-header", help="CSV: skip the first line or not (default: detect)."
    ),
    output: Path = typer.Option(Path("mixture.npz"), help="Where to write the parameters."),
    predict: Path = typer.Option(
        None, help="Instead of fitting, load these parameters and label DATA."
    ),
    labels: Path = typer.Option(None, help="With --predict: write the labels here (.npy)."),
) -> None:
    """Fit a Gaussian mixture (progress bar, final log-likelihood, BIC), or predict with one."""
    try:
        x = read_data(data, header)
    except DataError as err:
        _fail(str(err))
    if predict is not None:
        _predict(x, predict, labels)
        return
    _check_writable(output, "--output")
    gm = GaussianMixture(
        components,
        covariance_type=covariance,
        fitter=fitter,
        max_iter=max_iter,
        tol=tol,
        batch_size=batch_size,
        dtype=dtype,
        random_state=seed,
    )
    bars: list[tqdm] = []  # opened at the first pass, so a rejected input prints no bar

    def progress(n_iter: int, log_likelihood: float) -> None:
        if not bars:
            bars.append(tqdm(total=max_iter, desc=f"{fitter} ({covariance})", unit="pass"))
        bars[0].update(1)
        bars[0].set_postfix(log_likelihood=f"{log_likelihood:.5f}")

    try:
        gm.fit(x, callback=progress)
    except ValueError as err:
        _fail(str(err))
    finally:
        for bar in bars:
            bar.close()
    try:
        save(gm, output)
    except OSError as err:
        _fail(f"--output {output}: {err}")
    typer.echo(f"converged: {gm.converged_} after {gm.n_iter_} passes")
    typer.echo(f"mean log-likelihood: {gm.score(x):.6f}")
    typer.echo(f"BIC: {gm.bic(x):.3f}")
    typer.echo(f"parameters written to {output}")

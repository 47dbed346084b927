"""``implicit-em fit``: fit a Gaussian mixture to a ``.npy``/``.csv`` file, or predict with one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from tqdm import tqdm

from implicit_em.mixture.estimator import GaussianMixture
from implicit_em.mixture.io import load, save

__all__ = ["fit_command", "read_data"]


def read_data(path: Path) -> np.ndarray:
    """A 2-D float array from ``.npy`` or ``.csv`` (comma-separated, no header)."""
    if path.suffix == ".npy":
        data = np.load(path)
    elif path.suffix == ".csv":
        data = np.loadtxt(path, delimiter=",", ndmin=2)
    else:
        raise typer.BadParameter(f"expected a .npy or .csv file, got {path.name}")
    return np.asarray(data, dtype=np.float64)


def fit_command(
    data: Path = typer.Argument(..., exists=True, dir_okay=False, help="DATA.npy or DATA.csv"),
    components: int = typer.Option(2, "--components", "-k", help="Number of components K."),
    covariance: str = typer.Option("full", help="full | tied | diag | spherical"),
    fitter: str = typer.Option("em", help="em | gd | adam | preconditioned"),
    max_iter: int = typer.Option(100, help="Maximum passes over the data."),
    tol: float = typer.Option(1e-3, help="Tolerance on the mean log-likelihood change."),
    batch_size: int = typer.Option(None, help="Rows per streamed chunk (default: all)."),
    dtype: str = typer.Option("float64", help="float64 | float32"),
    seed: int = typer.Option(0, help="Random seed of the initialization."),
    output: Path = typer.Option(Path("mixture.npz"), help="Where to write the parameters."),
    predict: Path = typer.Option(
        None, help="Instead of fitting, load these parameters and label DATA."
    ),
    labels: Path = typer.Option(None, help="With --predict: write the labels here (.npy)."),
) -> None:
    """Fit a Gaussian mixture (progress bar, final log-likelihood, BIC), or predict with one."""
    x = read_data(data)
    if predict is not None:
        gm = load(predict)
        y = gm.predict(x)
        if labels is not None:
            np.save(labels, y)
        counts = np.bincount(y, minlength=gm.n_components)
        typer.echo(f"mean log-likelihood: {gm.score(x):.6f}")
        typer.echo("component sizes: " + " ".join(str(c) for c in counts))
        return
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
    with tqdm(total=max_iter, desc=f"{fitter} ({covariance})", unit="pass") as bar:

        def progress(n_iter: int, log_likelihood: float) -> None:
            bar.update(1)
            bar.set_postfix(log_likelihood=f"{log_likelihood:.5f}")

        try:
            gm.fit(x, callback=progress)
        except ValueError as err:
            raise typer.BadParameter(str(err)) from err
    save(gm, output)
    typer.echo(f"converged: {gm.converged_} after {gm.n_iter_} passes")
    typer.echo(f"mean log-likelihood: {gm.score(x):.6f}")
    typer.echo(f"BIC: {gm.bic(x):.3f}")
    typer.echo(f"parameters written to {output}")

"""Saving a fitted `GaussianMixture` to `.npz` and loading it back, fitted."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.estimator import GaussianMixture
from implicit_em.mixture.parameters import Mixture

__all__ = ["load", "save"]


def save(gm: GaussianMixture, path: str | Path) -> None:
    """Write the parameters, the covariance type and the fit summary of `gm` to `path`."""
    np.savez(
        path,
        covariance_type=np.array(gm.covariance_type),
        fitter=np.array(gm.fitter),
        weights=gm.weights_,
        means=gm.means_,
        covariances=gm.covariances_,
        precisions_cholesky=gm.precisions_cholesky_,
        lower_bound=np.array(gm.lower_bound_),
        n_iter=np.array(gm.n_iter_),
    )


def load(path: str | Path) -> GaussianMixture:
    """A fitted `GaussianMixture` (float64, CPU) from a file written by `save`; `ValueError`
    saying what the file lacks for another kind of file (nothing in it is ever unpickled)."""
    if not zipfile.is_zipfile(path):
        raise ValueError("not an .npz archive")
    try:
        with np.load(path, allow_pickle=False) as data:
            covariance_type = str(data["covariance_type"])
            weights, means = torch.as_tensor(data["weights"]), torch.as_tensor(data["means"])
            covariances = torch.as_tensor(data["covariances"])
            fitter = str(data["fitter"])
            lower_bound, n_iter = float(data["lower_bound"]), int(data["n_iter"])
    except KeyError as err:
        raise ValueError(f"an .npz archive without the field {err.args[0].split()[0]}") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        objects = "pickle" in str(err)
        raise ValueError(
            "holds Python objects" if objects else f"a damaged archive ({err})"
        ) from None
    gm = GaussianMixture(len(weights), covariance_type=covariance_type, fitter=fitter)
    model = covariance_model(covariance_type)
    mixture = Mixture.from_covariances(
        model, weights.double(), means.double(), covariances.double()
    )
    gm._publish(mixture)
    gm.n_features_in_ = means.shape[1]
    gm.lower_bound_, gm.n_iter_, gm.converged_ = lower_bound, n_iter, True
    gm.history_ = {"log_likelihood": [], "n_reseeded": []}
    return gm

r"""What a fitted `GaussianMixture` computes: the per-row quantities, the scores and the
criteria, and the data handling the fit shares with them (dtypes, validation, chunks).

`FittedMixture` is the base class of `GaussianMixture` holding these methods; every one reads
the fitted parameters `_mixture` and streams its input in chunks, so memory is
$O(B\,K)$ per chunk whatever the number of rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from numbers import Integral
from typing import Any

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import Tensor

from implicit_em.mixture.data import (
    as_batches,
    check_tensor,
    is_batch_iterable,
    iterate_batches,
    to_output,
)
from implicit_em.mixture.fitting import default_chunk_rows
from implicit_em.mixture.parameters import EStep, Mixture, log_likelihood_and_responsibilities
from implicit_em.mixture.workspace import Workspace

__all__ = ["DTYPES", "FittedMixture"]

DTYPES = {"float64": torch.float64, "float32": torch.float32}
"""The values of the `dtype` parameter."""


class FittedMixture:
    """The methods of a fitted Gaussian mixture (the base class of `GaussianMixture`)."""

    # -----------------------------------------------------------------------------------------
    # Configuration
    # -----------------------------------------------------------------------------------------

    def _fit_dtype(self, data_dtype: Any) -> torch.dtype:
        """The dtype a fit computes in: the `dtype` parameter, else float32 for float32
        data (NumPy or torch) and float64 for anything else."""
        if self.dtype is not None:
            return DTYPES[self.dtype]
        return torch.float32 if data_dtype in (np.float32, torch.float32) else torch.float64

    def _method_dtype(self, data_dtype: Any) -> torch.dtype:
        """The dtype of a method's computation and output: the `dtype` parameter, else the
        common type of the data and the fitted parameters."""
        if self.dtype is not None:
            return DTYPES[self.dtype]
        fitted = self._mixture.means.dtype
        return torch.promote_types(self._fit_dtype(data_dtype), fitted)

    @property
    def _device(self) -> torch.device:
        return torch.device(self.device)

    def _check_x(self, x: Any, reset: bool) -> Any:
        """Validated 2-D data: a tensor stays a tensor, anything else becomes an ndarray."""
        if isinstance(x, Tensor):
            n_features = None if reset else getattr(self, "n_features_in_", None)
            x = check_tensor(x, n_features, type(self).__name__)
            if x.dtype not in (torch.float32, torch.float64):
                x = x.to(torch.float64)
            if reset:
                self.n_features_in_ = x.shape[1]
            return x
        return validate_data(self, x, reset=reset, dtype=[np.float64, np.float32])

    def _chunks(self, x: Any, dtype: torch.dtype) -> Iterator[Tensor]:
        """`x` as `dtype` chunks of `batch_size` rows, or of `default_chunk_rows`
        if None.

        Either way a pass visits every row once before its step: `batch_size=None` is exact
        whole-data EM, streamed through the cache.
        """
        rows = self.batch_size or default_chunk_rows(
            self.covariance_type, self.n_components, x.shape[1]
        )
        return as_batches(x, rows, dtype, self._device)

    # -----------------------------------------------------------------------------------------
    # Inference
    # -----------------------------------------------------------------------------------------

    def _rowwise(self, X: Any, quantity: Callable[[Tensor, Tensor], Tensor]) -> Any:
        check_is_fitted(self, "_mixture")
        X = self._check_x(X, reset=False)
        dtype = self._method_dtype(X.dtype)
        mixture = self._mixture.to(dtype, self._device)
        constants = EStep.of(mixture, mixture.shift)
        workspace = Workspace()
        with torch.no_grad():
            parts = []
            for chunk in self._chunks(X, dtype):
                log_p, r = log_likelihood_and_responsibilities(chunk, constants, workspace)
                parts.append(quantity(log_p, r))
        return to_output(torch.cat(parts), X)

    def score_samples(self, X: Any) -> Any:
        r"""Per-sample log-likelihood $\log p(x_t)$.

        Parameters
        ----------
        X : array_like or Tensor
            The data, `[N, D]`.

        Returns
        -------
        ndarray or Tensor
            $\log p(x_t)$, `[N]`: an array, or a tensor on `X`'s device when `X` is a tensor.
        """
        return self._rowwise(X, lambda log_p, r: log_p)

    def _total_log_likelihood(self, X: Any) -> tuple[float, int]:
        r"""$\ell = \sum_t \log p(x_t)$ (summed in float64) and the number of rows, for an
        array, a tensor or a re-iterable of batches."""
        check_is_fitted(self, "_mixture")
        if not is_batch_iterable(X):
            log_p = torch.as_tensor(self.score_samples(X)).double()
            return float(log_p.sum()), log_p.shape[0]
        total, rows = 0.0, 0
        for x in iterate_batches(X, self.n_features_in_, type(self).__name__, None, self._device):
            log_p = self.score_samples(x).double()
            total, rows = total + float(log_p.sum()), rows + log_p.shape[0]
        if rows == 0:
            raise ValueError("received an empty collection of batches")
        return total, rows

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood per sample.

        Parameters
        ----------
        X : array_like, Tensor or re-iterable of batches
            The data, `[N, D]`, or a re-iterable collection of `[B, D]` batches.
        y : None
            Ignored (scikit-learn's signature).

        Returns
        -------
        float
            `score_samples(X).mean()` (computed in its dtype, as scikit-learn does), or the
            float64 mean over every row of the batches.
        """
        if not is_batch_iterable(X):
            return float(self.score_samples(X).mean())
        total, rows = self._total_log_likelihood(X)
        return total / rows

    def predict_proba(self, X: Any) -> Any:
        r"""Responsibilities $r_{tj} = p(j \mid x_t)$.

        Parameters
        ----------
        X : array_like or Tensor
            The data, `[N, D]`.

        Returns
        -------
        ndarray or Tensor
            $r_{tj}$, `[N, K]`, each row on the simplex.
        """
        return self._rowwise(X, lambda log_p, r: r.clone())

    def predict(self, X: Any) -> Any:
        r"""The most responsible component of every row.

        Parameters
        ----------
        X : array_like or Tensor
            The data, `[N, D]`.

        Returns
        -------
        ndarray or Tensor
            $\arg\max_j r_{tj}$, `[N]` int64.
        """
        return self._rowwise(X, lambda log_p, r: r.argmax(dim=1))

    def bic(self, X: Any) -> float:
        r"""Bayesian information criterion $-2\ell + p\log N$ (lower is better).

        $\ell = \sum_t \log p(x_t)$ is the total log-likelihood (summed in float64), $p$ the
        number of free parameters and $N$ the number of rows.

        Parameters
        ----------
        X : array_like, Tensor or re-iterable of batches
            The data, `[N, D]`, or a re-iterable collection of `[B, D]` batches.

        Returns
        -------
        float
            The BIC of the fitted mixture on `X`.
        """
        total, rows = self._total_log_likelihood(X)
        return -2 * total + self._mixture.n_free_parameters() * math.log(rows)

    def aic(self, X: Any) -> float:
        r"""Akaike information criterion $-2\ell + 2p$ (lower is better).

        $\ell = \sum_t \log p(x_t)$ is the total log-likelihood (summed in float64) and $p$
        the number of free parameters.

        Parameters
        ----------
        X : array_like, Tensor or re-iterable of batches
            The data, `[N, D]`, or a re-iterable collection of `[B, D]` batches.

        Returns
        -------
        float
            The AIC of the fitted mixture on `X`.
        """
        total, _ = self._total_log_likelihood(X)
        return -2 * total + 2 * self._mixture.n_free_parameters()

    def sample(self, n_samples: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Draw points from the fitted mixture.

        Parameters
        ----------
        n_samples : int, default=1
            The number of points, at least 1.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            The points, in the fitted dtype, grouped by component.
        labels : ndarray of shape (n_samples,)
            The component of every point.
        """
        check_is_fitted(self, "_mixture")
        if isinstance(n_samples, bool) or not isinstance(n_samples, Integral) or n_samples < 1:
            raise ValueError(f"Invalid value for 'n_samples': {n_samples}. It must be >= 1")
        rng = check_random_state(self.random_state)
        mixture = self._mixture
        counts = rng.multinomial(n_samples, self.weights_.astype(np.float64))
        labels = np.repeat(np.arange(self.n_components), counts)
        z = torch.as_tensor(
            rng.standard_normal((n_samples, mixture.n_features)),
            dtype=mixture.means.dtype,
            device=mixture.means.device,
        )
        idx = torch.as_tensor(labels, device=mixture.means.device)
        x = mixture.means[idx] + mixture.model.noise(mixture.covariances, idx, z)
        return x.cpu().numpy(), labels

    def _publish(self, mixture: Mixture) -> None:
        """Set the fitted parameters and their NumPy attributes."""
        self._mixture = mixture

        def numpy(t: Tensor) -> np.ndarray:
            return t.detach().cpu().numpy()

        self.weights_ = numpy(mixture.weights)
        self.means_ = numpy(mixture.means)
        self.covariances_ = numpy(mixture.covariances)
        self.precisions_cholesky_ = numpy(mixture.precisions_cholesky)
        self.precisions_ = numpy(mixture.model.precision(mixture.precisions_cholesky))

"""`GaussianMixture`: the scikit-learn surface (parameters, `fit`, `partial_fit`, fitted
attributes) over the fitting loop of `fitting` and the methods of `inference`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from torch import Tensor

from implicit_em.mixture.covariance import COVARIANCE_TYPES
from implicit_em.mixture.data import check_rows, first_batch, is_batch_iterable, iterate_batches
from implicit_em.mixture.distributed import is_first_rank, resolve, uses_collectives
from implicit_em.mixture.fitting import CACHE_BYTES, Callback, Loop, PassByPass
from implicit_em.mixture.inference import DTYPES, FittedMixture
from implicit_em.mixture.initialization import INIT_PARAMS
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.start import StartSettings, initial_mixture
from implicit_em.mixture.step_rules import FITTERS

__all__ = ["GaussianMixture"]


class GaussianMixture(FittedMixture, DensityMixin, BaseEstimator):
    r"""Gaussian mixture $p(x) = \sum_j \pi_j\,\mathcal N(x\mid\mu_j,\Sigma_j)$.

    Fitted by EM or by gradient descent (`fitter`), over one loop that streams the data in
    chunks. A drop-in for scikit-learn's `GaussianMixture`: the same parameters with the same
    meaning, validated by scikit-learn's parameter constraints, and the same fitted attributes.
    The extensions are `fitter`, `init_sample_size`, `batch_size`, `cache_bytes`,
    `learning_rate`, `device`, `dtype` and `distributed`, the `history_` attribute,
    `partial_fit`, tensor input (methods then return tensors on the input's device) and
    re-iterable batches such as a `DataLoader` (`fit`, `score`, `bic`, `aic`).

    **Data types.** With `dtype=None`, as in scikit-learn, float32 input is fitted in float32,
    and every fitted attribute and every floating output (`score_samples`, `predict_proba`,
    `sample`) is float32; float64 input (and any other input, converted) is fitted and returned
    in float64. A method computes in the common type of its input and the fitted parameters
    (float32 input on a float64 fit gives float64). The extension `dtype="float32"` or
    `dtype="float64"` sets the type of the fit and of every output, whatever the input.

    Parameters
    ----------
    n_components : int, default=1
        The number of mixture components $K$.
    covariance_type : {"full", "tied", "diag", "spherical"}, default="full"
        The form of the covariances: `"full"`, one full matrix per component; `"tied"`, one full
        matrix shared by all components; `"diag"`, one diagonal matrix per component;
        `"spherical"`, one variance per component.
    fitter : {"em", "gd", "adam", "preconditioned"}, default="em"
        The step rule (an extension; see `implicit_em.mixture.step_rules`). `"em"` is classical
        EM; `"gd"`/`"adam"` descend the core's mixture NLL by autograd, in each component's
        units; `"preconditioned"` takes Xu & Jordan's preconditioned gradient steps, which
        reproduce EM.
    tol : float, default=1e-3
        Convergence threshold on the change of the mean log-likelihood per sample between two
        passes.
    reg_covar : float, default=1e-6
        Non-negative constant added to the diagonal of every covariance, so that all are
        positive definite.
    max_iter : int, default=100
        The number of passes over the data (one step each) of every initialization.
    n_init : int, default=1
        The number of initializations; the one with the best final lower bound is kept.
    init_params : {"kmeans", "k-means++", "random", "random_from_data"}, default="kmeans"
        How the initial responsibilities are computed: by k-means, by k-means++ seeding (each
        seed row responsible for its component), at random, or from randomly chosen rows, on
        every row as in scikit-learn (see `init_sample_size`), or on the first batch of an
        iterable; the initial parameters are one M-step from them.
    weights_init : array_like of shape (n_components,), default=None
        Initial weights $\pi$; `None` takes them from `init_params`.
    means_init : array_like of shape (n_components, n_features), default=None
        Initial means $\mu$; `None` takes them from `init_params`.
    precisions_init : array_like, default=None
        Initial precisions $\Sigma^{-1}$ in the shape of `covariance_type` (see `precisions_`);
        `None` takes them from `init_params`.
    random_state : int, RandomState instance or None, default=None
        Seeds the initialization (and `sample`); an int gives reproducible fits.
    warm_start : bool, default=False
        If true, `fit` continues from the previous fit's parameters (a single initialization,
        `n_init` is ignored).
    init_sample_size : int or None, default=None
        The most rows the initial responsibilities are computed on (an extension). `None`
        takes every row, as scikit-learn does; an integer draws that many rows at random when
        there are more, a departure from scikit-learn: faster on large data, but the start,
        and so the fit, is no longer scikit-learn's.
    batch_size : int or None, default=None
        Rows per chunk of the streamed E-step (an extension). `None` means the whole data per
        pass (exact EM), streamed internally in cache-sized chunks (`default_chunk_rows`, 1,024
        to 32,768 rows); an integer sets the chunk. EM is exact either way: a pass sums every
        chunk's statistics before its one step.
    cache_bytes : int, default=536870912
        Memory budget, in bytes, for the per-row features kept across passes (an extension):
        when those of the whole data fit (for EM, $[x^2, x]$ for `"diag"`, the augmented rows
        $[x, 1]$ for `"full"`, in the fit's dtype), array and tensor input is converted and
        featurized once per fit instead of once per pass; otherwise, and for iterables of
        batches, every pass streams. `0` always streams. The default is 512 MiB.
    learning_rate : float or None, default=None
        Step size of `"gd"` (default 1.0) and `"adam"` (default 0.1), whose steps are taken
        in each component's own units, so that one rate serves raw and standardized data;
        unused by the other fitters (an extension).
    device : str or torch.device, default="cpu"
        Where the fit and the methods compute, e.g. `"cuda"` (an extension). Fitted attributes
        are NumPy arrays either way.
    dtype : {None, "float64", "float32"}
        The floating type of the fit and of every output (an extension). `None` follows the
        data, as scikit-learn does (see *Data types* above).
    distributed : {"auto", True, False}, default="auto"
        Whether `fit` and `partial_fit` take part in a `torch.distributed` process group (an
        extension; see `implicit_em.mixture.distributed`): each rank passes its own shard and
        the fit is that of the shards concatenated in rank order. `"auto"` does so when a
        process group of more than one process is initialized; `True` requires an initialized
        group; `False` fits this process's data alone, also inside a group.
    verbose : int, default=0
        Nonzero prints the log-likelihood, its change and the number of re-seeded components every
        `verbose_interval` passes.
    verbose_interval : int, default=10
        Passes between two printed lines when `verbose` is set.

    Attributes
    ----------
    weights_ : ndarray of shape (n_components,)
        The mixing weights $\pi_j$, on the simplex.
    means_ : ndarray of shape (n_components, n_features)
        The component means $\mu_j$.
    covariances_ : ndarray
        The covariances $\Sigma_j$, of shape `(n_components, n_features, n_features)` for
        `"full"`, `(n_features, n_features)` for `"tied"`, `(n_components, n_features)` for
        `"diag"` (variances) and `(n_components,)` for `"spherical"` (variances).
    precisions_ : ndarray
        The precision matrices $\Sigma_j^{-1}$, in the shape of `covariances_`.
    precisions_cholesky_ : ndarray
        The Cholesky factors $U_j$ of the precisions, $\Sigma_j^{-1} = U_jU_j^\top$ with $U_j$
        upper triangular, in the shape of `covariances_` (for `"diag"` and `"spherical"`,
        $1/\sigma$: the inverse standard deviations).
    converged_ : bool
        Whether the best initialization converged within `max_iter` passes: its last change
        of the mean log-likelihood was below `tol` (and, for `"gd"` and `"adam"`, so was the
        squared norm of its gradient: steps too short to matter are not convergence).
    n_iter_ : int
        The number of passes the best initialization took.
    lower_bound_ : float
        The mean log-likelihood per sample at the last pass (before its step, as in
        scikit-learn) of the best initialization.
    lower_bounds_ : list of float
        `lower_bound_` of every pass of the best initialization, as in scikit-learn.
    history_ : dict of str to list
        Per pass of the best initialization (an extension): `"log_likelihood"` (the mean per
        sample, the values of `lower_bounds_`) and `"n_reseeded"` (components re-seeded after
        that pass's step, see `implicit_em.mixture.reseed`).
    n_features_in_ : int
        The number of features seen during `fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        The names of the features seen during `fit`; set only when `X` has feature names that
        are all strings (a pandas DataFrame).

    Examples
    --------
    >>> import numpy as np
    >>> from implicit_em.mixture import GaussianMixture
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(-3, 1, (200, 2)), rng.normal(3, 1, (200, 2))])
    >>> gm = GaussianMixture(n_components=2, random_state=0).fit(X.astype(np.float32))
    >>> gm.means_.dtype, gm.converged_
    (dtype('float32'), True)
    >>> np.sort(gm.means_[:, 0]).round()
    array([-3.,  3.], dtype=float32)
    >>> gm.predict_proba(X[:3]).dtype
    dtype('float64')
    """

    _parameter_constraints: ClassVar[dict] = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "covariance_type": [StrOptions(set(COVARIANCE_TYPES))],
        "fitter": [StrOptions(set(FITTERS))],
        "tol": [Interval(Real, 0.0, None, closed="left")],
        "reg_covar": [Interval(Real, 0.0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "init_params": [StrOptions(set(INIT_PARAMS))],
        "weights_init": ["array-like", None],
        "means_init": ["array-like", None],
        "precisions_init": ["array-like", None],
        "random_state": ["random_state"],
        "warm_start": ["boolean"],
        "init_sample_size": [Interval(Integral, 1, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "cache_bytes": [Interval(Integral, 0, None, closed="left")],
        "learning_rate": [Interval(Real, 0.0, None, closed="neither"), None],
        "device": [str, torch.device],
        "dtype": [StrOptions(set(DTYPES)), None],
        "distributed": [StrOptions({"auto"}), "boolean"],
        "verbose": ["verbose"],
        "verbose_interval": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_components: int = 1,
        *,
        covariance_type: str = "full",
        fitter: str = "em",
        tol: float = 1e-3,
        reg_covar: float = 1e-6,
        max_iter: int = 100,
        n_init: int = 1,
        init_params: str = "kmeans",
        weights_init: Any = None,
        means_init: Any = None,
        precisions_init: Any = None,
        random_state: Any = None,
        warm_start: bool = False,
        init_sample_size: int | None = None,
        batch_size: int | None = None,
        cache_bytes: int = CACHE_BYTES,
        learning_rate: float | None = None,
        device: str = "cpu",
        dtype: str | None = None,
        distributed: str | bool = "auto",
        verbose: int = 0,
        verbose_interval: int = 10,
    ) -> None:
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.fitter = fitter
        self.tol = tol
        self.reg_covar = reg_covar
        self.max_iter = max_iter
        self.n_init = n_init
        self.init_params = init_params
        self.weights_init = weights_init
        self.means_init = means_init
        self.precisions_init = precisions_init
        self.random_state = random_state
        self.warm_start = warm_start
        self.init_sample_size = init_sample_size
        self.batch_size = batch_size
        self.cache_bytes = cache_bytes
        self.learning_rate = learning_rate
        self.device = device
        self.dtype = dtype
        self.distributed = distributed
        self.verbose = verbose
        self.verbose_interval = verbose_interval

    def _start(self, x: Any, rng: np.random.RandomState, dtype: torch.dtype) -> Mixture:
        """The starting mixture of one initialization (see `start.initial_mixture`)."""
        settings = StartSettings.from_params(self.get_params())
        return initial_mixture(settings, x, rng, dtype, self._device)

    def _fit_runs(
        self,
        init_data: Any,
        batches: Callable[[], Iterable[Tensor]],
        n_rows: int | None,
        callback: Callback | None,
        dtype: torch.dtype,
    ) -> None:
        do_init = not (self.warm_start and hasattr(self, "converged_"))
        rng = check_random_state(self.random_state)

        def starts() -> Iterator[tuple[Mixture, float]]:
            if not do_init:
                yield self._mixture.to(dtype, self._device), self.lower_bound_
                return
            for _ in range(self.n_init):
                yield self._start(init_data, rng, dtype), -math.inf

        best = Loop.from_params(self.get_params()).best_run(starts(), batches, n_rows, callback)
        self._publish(best.mixture)
        self._passes = None
        self.converged_ = best.converged
        self.n_iter_ = best.n_iter
        self.lower_bound_ = best.lower_bound
        self.lower_bounds_ = list(best.history["log_likelihood"])
        self.history_ = best.history

    @uses_collectives
    def fit(self, X: Any, y: Any = None, *, callback: Callback | None = None) -> GaussianMixture:
        """Fit the mixture to `X`: `n_init` initializations of up to `max_iter` passes each.

        Parameters
        ----------
        X : array_like, Tensor or re-iterable of batches
            The data, `[N, D]`: an array, a tensor, or a re-iterable collection of `[B, D]`
            batches such as a `DataLoader` (each pass iterates it once; a one-shot iterator is
            refused).
        y : None
            Ignored (scikit-learn's signature).
        callback : callable, optional
            `callback(n_iter, mean_log_likelihood)`, called after every pass.

        Returns
        -------
        GaussianMixture
            The fitted estimator itself.
        """
        self._validate_params()
        if is_batch_iterable(X):
            return self._fit_iterable(X, callback)
        X = self._check_x(X, reset=not (self.warm_start and hasattr(self, "converged_")))
        check_rows(X.shape[0], self.n_components)
        dtype = self._fit_dtype(X.dtype)
        self._fit_runs(X, lambda: self._chunks(X, dtype), X.shape[0], callback, dtype)
        return self

    def _fit_iterable(self, batches: Iterable[Any], callback: Callback | None) -> GaussianMixture:
        name = type(self).__name__
        first = first_batch(batches, name)
        self.n_features_in_ = first.shape[1]
        check_rows(first.shape[0], self.n_components)
        dtype = self._fit_dtype(first.dtype)

        def stream() -> Iterator[Tensor]:
            for x in iterate_batches(batches, self.n_features_in_, name, dtype, self._device):
                yield from self._chunks(x, dtype)

        # The concatenated data's first batch is rank 0's.
        self._fit_runs(first if is_first_rank() else first[:0], stream, None, callback, dtype)
        return self

    @uses_collectives
    def partial_fit(self, X: Any, y: Any = None, *, end_of_pass: bool = True) -> GaussianMixture:
        """Stream `X` into the current pass; with `end_of_pass` take the pass's step.

        The first call initializes the parameters from `X`. Calling `partial_fit` on every
        batch of a pass with `end_of_pass=False` except the last is exactly one EM (or
        gradient) step on the concatenated data; the default makes every call one full step.

        Parameters
        ----------
        X : array_like or Tensor
            A batch of rows, `[B, D]`.
        y : None
            Ignored (scikit-learn's signature).
        end_of_pass : bool, default=True
            Whether `X` closes the pass: its step is taken and `n_iter_`, `lower_bound_`,
            `converged_` and `history_` are updated.

        Returns
        -------
        GaussianMixture
            The estimator itself.
        """
        self._validate_params()
        first = not hasattr(self, "_mixture")
        X = self._check_x(X, reset=first)
        if first:
            check_rows(X.shape[0], self.n_components)
            rng = check_random_state(self.random_state)
            self._publish(self._start(X, rng, self._fit_dtype(X.dtype)))
            self.history_ = {"log_likelihood": [], "n_reseeded": []}
            self.lower_bounds_ = self.history_["log_likelihood"]
            self.n_iter_, self.lower_bound_, self.converged_ = 0, -math.inf, False
        if getattr(self, "_passes", None) is None:
            self._passes = PassByPass(Loop.from_params(self.get_params()))
        with torch.no_grad():
            self._passes.add(self._mixture, self._chunks(X, self._mixture.means.dtype))
            if end_of_pass:
                closed = self._passes.close(self.lower_bound_)
                mixture, log_likelihood, n_reseeded, self.converged_ = closed
                self.lower_bound_ = log_likelihood
                self.n_iter_ += 1
                self.history_["log_likelihood"].append(log_likelihood)
                self.history_["n_reseeded"].append(n_reseeded)
                self._publish(mixture)
        return self

    def fit_predict(self, X: Any, y: Any = None) -> Any:
        """Fit, then the component with the largest responsibility for every row of `X`.

        Parameters
        ----------
        X : array_like or Tensor
            The data, `[N, D]`.
        y : None
            Ignored (scikit-learn's signature).

        Returns
        -------
        ndarray or Tensor
            The component labels, `[N]` int64.
        """
        return self.fit(X).predict(X)

    def is_distributed(self) -> bool:
        """Whether fits take part in a `torch.distributed` process group (`distributed`)."""
        return resolve(self.distributed)

r"""`GaussianMixture`: a scikit-learn estimator fitted by EM or by gradient descent.

One template loop (initialize, pass over the data, step, re-seed, convergence on the *mean*
log-likelihood) owns the fit; the four `fitter` values differ only in the step rule of
`step_rules`, and the four `covariance_type` values only in the
functions of `covariance`. Passes stream over chunks of
`batch_size` rows (or the batches of a `DataLoader`) and accumulate sums, so memory is
$O(B\,K + K\,D^2)$ and `torch.distributed` ranks combine with one all-reduce.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import Tensor

from implicit_em.mixture.covariance import COVARIANCE_TYPES, covariance_model
from implicit_em.mixture.data import (
    as_batches,
    check_rows,
    check_tensor,
    is_batch_iterable,
    iterate_batches,
    to_output,
)
from implicit_em.mixture.distributed import (
    all_reduce_sums,
    broadcast_mixture,
    is_first_rank,
    resolve,
    uses_collectives,
)
from implicit_em.mixture.initialization import (
    INIT_PARAMS,
    check_means,
    check_precisions,
    check_weights,
    initial_responsibilities,
    initial_sample,
    responsibility_start,
)
from implicit_em.mixture.parameters import EStep, Mixture, log_likelihood_and_responsibilities
from implicit_em.mixture.reseed import WorstSamples, reseed_empty
from implicit_em.mixture.step_rules import FITTERS, StepRule, make_step_rule
from implicit_em.mixture.workspace import Workspace

__all__ = ["GaussianMixture"]

Callback = Callable[[int, float], None]

_INIT_SAMPLES = 100_000
_DTYPES = {"float64": torch.float64, "float32": torch.float32}
_CHUNK_NUMBERS = 2**20
_CHUNK_ROWS = (1024, 32768)


def default_chunk_rows(covariance_type: str, n_components: int, n_features: int) -> int:
    r"""Rows per internal chunk when `batch_size` is None.

    A chunk holds $B\,(w + K)$ numbers (`w` the type's features per row: $KD$
    whitened residuals for `full`, $[y^2, y]$ for `diag`); about $2^{20}$ of
    them (4 MiB in float32) keep its E-step and M-step in cache, clipped to 1,024..32,768 rows.
    Measured on a 2-core EPYC (AVX2): full (32, 16) is fastest at 2-4k rows, and the whole
    200k rows at once was 2-3 times slower; narrow rows gain from long chunks, which spread
    the fixed cost of a chunk's few dozen operations (diag (32, 16) took 27 ms per pass at
    8,192 rows and 22 ms at 13,107; diag (8, 8) 23 and 16 ms at 8,192 and 32,768).
    """
    width = covariance_model(covariance_type).row_width(n_components, n_features)
    rows = _CHUNK_NUMBERS // (width + n_components)
    return min(max(rows, _CHUNK_ROWS[0]), _CHUNK_ROWS[1])


@dataclass
class _Run:
    mixture: Mixture
    lower_bound: float = -math.inf
    converged: bool = False
    n_iter: int = 0
    history: dict[str, list[float]] = field(
        default_factory=lambda: {"log_likelihood": [], "n_reseeded": []}
    )


class GaussianMixture(DensityMixin, BaseEstimator):
    r"""Gaussian mixture $p(x) = \sum_j \pi_j\,\mathcal N(x\mid\mu_j,\Sigma_j)$.

    Fitted by EM or by gradient descent (`fitter`), over one loop that streams the data in
    chunks. A drop-in for scikit-learn's `GaussianMixture`: the same parameters with the same
    meaning, validated by scikit-learn's parameter constraints, and the same fitted attributes.
    The extensions are `fitter`, `batch_size`, `learning_rate`, `device`, `dtype` and
    `distributed`, the `history_` attribute, `partial_fit`, tensor input (methods then return
    tensors on the input's device) and re-iterable batches such as a `DataLoader` (`fit`,
    `score`, `bic`, `aic`).

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
        EM; `"gd"`/`"adam"` descend the core's mixture NLL by autograd; `"preconditioned"` takes
        Xu & Jordan's preconditioned gradient steps, which reproduce EM.
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
        seed row responsible for its component), at random, or from randomly chosen rows. They
        are computed on at most 100,000 rows (a random subset), or on the first batch of an
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
    batch_size : int or None, default=None
        Rows per chunk of the streamed E-step (an extension). `None` means the whole data per
        pass (exact EM), streamed internally in cache-sized chunks (`default_chunk_rows`, 1,024
        to 32,768 rows); an integer sets the chunk. EM is exact either way: a pass sums every
        chunk's statistics before its one step.
    learning_rate : float or None, default=None
        Step size of `"gd"` (default 0.5) and `"adam"` (default 0.05); unused by the other
        fitters (an extension).
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
        Whether the best initialization converged (its last change of the mean log-likelihood
        was below `tol`) within `max_iter` passes.
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
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "learning_rate": [Interval(Real, 0.0, None, closed="neither"), None],
        "device": [str, torch.device],
        "dtype": [StrOptions(set(_DTYPES)), None],
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
        batch_size: int | None = None,
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
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.device = device
        self.dtype = dtype
        self.distributed = distributed
        self.verbose = verbose
        self.verbose_interval = verbose_interval

    # -----------------------------------------------------------------------------------------
    # Configuration
    # -----------------------------------------------------------------------------------------

    def _fit_dtype(self, data_dtype: Any) -> torch.dtype:
        """The dtype a fit computes in: the `dtype` parameter, else float32 for float32
        data (NumPy or torch) and float64 for anything else."""
        if self.dtype is not None:
            return _DTYPES[self.dtype]
        return torch.float32 if data_dtype in (np.float32, torch.float32) else torch.float64

    def _method_dtype(self, data_dtype: Any) -> torch.dtype:
        """The dtype of a method's computation and output: the `dtype` parameter, else the
        common type of the data and the fitted parameters."""
        if self.dtype is not None:
            return _DTYPES[self.dtype]
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
    # Initialization
    # -----------------------------------------------------------------------------------------

    def _initial_mixture(self, x: Any, rng: np.random.RandomState, dtype: torch.dtype) -> Mixture:
        """The M-step of the initial responsibilities, then the user's overrides, as `dtype`
        (see `initialization`)."""
        model = covariance_model(self.covariance_type)
        k, dim = self.n_components, self.n_features_in_
        weights = None if self.weights_init is None else check_weights(self.weights_init, k)
        means = None if self.means_init is None else check_means(self.means_init, k, dim)
        precisions = (
            None
            if self.precisions_init is None
            else check_precisions(self.precisions_init, model.name, k, dim)
        )
        if weights is None or means is None or precisions is None:
            sample = initial_sample(x, rng, _INIT_SAMPLES)
            resp = initial_responsibilities(sample, k, self.init_params, rng)
            start = responsibility_start(model, sample, resp, self.init_params, self.reg_covar)
        else:
            start = None

        def tensor(value: np.ndarray | None, fallback: Tensor | None) -> Tensor:
            if value is None:
                return fallback
            return torch.as_tensor(value, dtype=torch.float64)

        covariances = (
            start.covariances
            if precisions is None
            else model.from_precision(torch.as_tensor(precisions, dtype=torch.float64))
        )
        mixture = Mixture.from_covariances(
            model,
            tensor(weights, None if start is None else start.weights),
            tensor(means, None if start is None else start.means),
            covariances,
        )
        return mixture.to(dtype, self._device)

    # -----------------------------------------------------------------------------------------
    # The template loop
    # -----------------------------------------------------------------------------------------

    def _pass(
        self, rule: StepRule, mixture: Mixture, batches: Iterable[Tensor]
    ) -> tuple[Mixture, float, int]:
        """One pass: accumulate every chunk, all-reduce, step, re-seed."""
        rule.begin(mixture)
        worst = WorstSamples(mixture.n_components, mixture.n_features, mixture.means)
        for x in batches:
            worst.add(x, rule.accumulate(x))
        return self._finish_pass(rule, worst)

    def _finish_pass(self, rule: StepRule, worst: WorstSamples) -> tuple[Mixture, float, int]:
        sums = all_reduce_sums(rule.sums)
        mean_log_likelihood = float(sums["log_likelihood"] / sums["count"])
        stepped, masses = rule.step()
        mixture, n_reseeded = reseed_empty(stepped, masses, worst, sums["count"])
        return mixture, mean_log_likelihood, n_reseeded

    def _iterate(
        self,
        mixture: Mixture,
        batches: Callable[[], Iterable[Tensor]],
        callback: Callback | None,
        lower_bound: float,
    ) -> _Run:
        run = _Run(mixture, lower_bound=lower_bound)
        rule = make_step_rule(self.fitter, float(self.reg_covar), self.learning_rate)
        with torch.no_grad():
            for n_iter in range(1, self.max_iter + 1):
                previous = run.lower_bound
                run.mixture, run.lower_bound, n_reseeded = self._pass(rule, run.mixture, batches())
                run.n_iter = n_iter
                run.history["log_likelihood"].append(run.lower_bound)
                run.history["n_reseeded"].append(n_reseeded)
                change = run.lower_bound - previous
                if self.verbose and n_iter % self.verbose_interval == 0:
                    print(
                        f"Iteration {n_iter}: log-likelihood {run.lower_bound:.6f}, "
                        f"change {change:.3e}, re-seeded {n_reseeded}"
                    )
                if callback is not None:
                    callback(n_iter, run.lower_bound)
                if abs(change) < self.tol:
                    run.converged = True
                    break
        return run

    def _fit_runs(
        self,
        init_data: Any,
        batches: Callable[[], Iterable[Tensor]],
        callback: Callback | None,
        dtype: torch.dtype,
    ) -> None:
        do_init = not (self.warm_start and hasattr(self, "converged_"))
        rng = check_random_state(self.random_state)
        best: _Run | None = None
        for _ in range(self.n_init if do_init else 1):
            if do_init:
                mixture = broadcast_mixture(self._initial_mixture(init_data, rng, dtype))
                start = -math.inf
            else:
                mixture, start = self._mixture.to(dtype, self._device), self.lower_bound_
            run = self._iterate(mixture, batches, callback, start)
            if best is None or run.lower_bound > best.lower_bound:
                best = run
        if not best.converged and self.max_iter > 0:
            warnings.warn(
                "Best performing initialization did not converge. Try different init "
                "parameters, or increase max_iter, tol, or check for degenerate data.",
                ConvergenceWarning,
                stacklevel=4,
            )
        self._publish(best.mixture)
        self._rule, self._worst = None, None
        self.converged_ = best.converged
        self.n_iter_ = best.n_iter
        self.lower_bound_ = best.lower_bound
        self.lower_bounds_ = list(best.history["log_likelihood"])
        self.history_ = best.history

    def _publish(self, mixture: Mixture) -> None:
        self._mixture = mixture

        def numpy(t: Tensor) -> np.ndarray:
            return t.detach().cpu().numpy()

        self.weights_ = numpy(mixture.weights)
        self.means_ = numpy(mixture.means)
        self.covariances_ = numpy(mixture.covariances)
        self.precisions_cholesky_ = numpy(mixture.precisions_cholesky)
        self.precisions_ = numpy(mixture.model.precision(mixture.precisions_cholesky))

    # -----------------------------------------------------------------------------------------
    # Fitting
    # -----------------------------------------------------------------------------------------

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
        self._fit_runs(X, lambda: self._chunks(X, dtype), callback, dtype)
        return self

    def _fit_iterable(self, batches: Iterable[Any], callback: Callback | None) -> GaussianMixture:
        if iter(batches) is batches:
            raise ValueError(
                "fit needs a re-iterable collection of batches (e.g. a DataLoader), "
                "not a one-shot iterator"
            )
        name = type(self).__name__
        first = next(iterate_batches(batches, None, name, None, torch.device("cpu")), None)
        if first is None:
            raise ValueError("fit received an empty collection of batches")
        self.n_features_in_ = first.shape[1]
        check_rows(first.shape[0], self.n_components)
        dtype = self._fit_dtype(first.dtype)

        def stream() -> Iterator[Tensor]:
            for x in iterate_batches(batches, self.n_features_in_, name, dtype, self._device):
                yield from self._chunks(x, dtype)

        # The concatenated data's first batch is rank 0's.
        self._fit_runs(first if is_first_rank() else first[:0], stream, callback, dtype)
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
            dtype = self._fit_dtype(X.dtype)
            self._publish(broadcast_mixture(self._initial_mixture(X, rng, dtype)))
            self.history_ = {"log_likelihood": [], "n_reseeded": []}
            self.lower_bounds_ = self.history_["log_likelihood"]
            self.n_iter_, self.lower_bound_, self.converged_ = 0, -math.inf, False
        if getattr(self, "_rule", None) is None:
            self._rule = make_step_rule(self.fitter, float(self.reg_covar), self.learning_rate)
        if getattr(self, "_worst", None) is None:
            self._rule.begin(self._mixture)
            self._worst = WorstSamples(self.n_components, X.shape[1], self._mixture.means)
        with torch.no_grad():
            for chunk in self._chunks(X, self._mixture.means.dtype):
                self._worst.add(chunk, self._rule.accumulate(chunk))
            if end_of_pass:
                mixture, log_likelihood, n_reseeded = self._finish_pass(self._rule, self._worst)
                self._worst = None
                self.converged_ = abs(log_likelihood - self.lower_bound_) < self.tol
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
                log_p, r, _, _ = log_likelihood_and_responsibilities(chunk, constants, workspace)
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

    def is_distributed(self) -> bool:
        """Whether fits take part in a `torch.distributed` process group (`distributed`)."""
        return resolve(self.distributed)

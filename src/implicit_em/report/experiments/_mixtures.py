"""Data, starts and pass-by-pass paths shared by the mixture-regime experiments (E2-E5).

Paths are driven pass by pass through `implicit_em.mixture.step_rules`, so every step of every
fitter can be compared with the EM step taken from the same parameters. EM and the preconditioned
rule are the estimator's own; gradient descent and Adam are the plain rules in raw coordinates
(`make_step_rule(..., scaled=False)`), the objects of the paper's claims, not the estimator's
default `gd` and `adam`, which step in each component's units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.datasets import load_wine
from sklearn.decomposition import PCA
from sklearn.preprocessing import StandardScaler
from torch import Tensor

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.step_rules import GradientRule, StepRule, make_step_rule
from implicit_em.report.running.plan import Unit

REG_COVAR = (
    0.0  # the plain likelihood: a ridge would move EM's fixed point off its stationary points
)
DTYPE = torch.float64

# The synthetic ground truth: three well-separated 2-D Gaussians of unequal weight and shape.
TRUE_WEIGHTS = np.array([0.5, 0.3, 0.2])
TRUE_MEANS = np.array([[0.0, 0.0], [4.0, 1.0], [1.0, 4.5]])
TRUE_COVARIANCES = np.array(
    [[[1.0, 0.3], [0.3, 0.6]], [[0.5, -0.2], [-0.2, 0.8]], [[0.4, 0.0], [0.0, 0.4]]]
)


@dataclass(frozen=True)
class Dataset:
    """Rows `x[N, D]` (float64), the number of components, and the ground-truth labels."""

    name: str
    x: Tensor
    labels: np.ndarray
    n_components: int


def synthetic(n: int, seed: int) -> Dataset:
    """`n` draws of the known three-component mixture (TRUE_*)."""
    rng = np.random.default_rng(seed)
    labels = rng.choice(len(TRUE_WEIGHTS), size=n, p=TRUE_WEIGHTS)
    chol = np.linalg.cholesky(TRUE_COVARIANCES)
    noise = rng.standard_normal((n, 2))
    x = TRUE_MEANS[labels] + np.einsum("nij,nj->ni", chol[labels], noise)
    return Dataset("synthetic", torch.tensor(x, dtype=DTYPE), labels, 3)


def wine(n_dims: int = 2) -> Dataset:
    """scikit-learn's bundled wine data (178 x 13), standardized and reduced by PCA; 3 cultivars."""
    bunch = load_wine()
    x = PCA(n_dims, random_state=0).fit_transform(StandardScaler().fit_transform(bunch.data))
    return Dataset("wine", torch.tensor(x, dtype=DTYPE), bunch.target, 3)


def datasets(n_synthetic: int, seed: int = 0) -> list[Dataset]:
    return [synthetic(n_synthetic, seed), wine()]


DATASETS = ("synthetic", "wine")
"""The names of `datasets`, in its order."""


def dataset(name: str, n_synthetic: int, seed: int) -> Dataset:
    """The data set `name` of `datasets(n_synthetic, seed)`."""
    return synthetic(n_synthetic, seed) if name == "synthetic" else wine()


def start_names(seeds: list[int]) -> list[tuple[int, str]]:
    """The (seed, data set name) of each of `starts`, without loading the data."""
    return [(seed, name) for seed in seeds for name in DATASETS]


def start_units(config: dict, start_unit: Callable[[dict, int, str], dict]) -> list[Unit]:
    """One unit per (seed, data set) of `config["seeds"]` (`start_names`), each computing
    `start_unit(config, seed, data_name)`, a module-level function."""
    return [
        Unit(f"{name}-seed{seed}", start_unit, {"config": config, "seed": seed, "data": name})
        for seed, name in start_names(config["seeds"])
    ]


def starts(seeds: list[int], n_synthetic: int) -> list[tuple[int, Dataset]]:
    """Every (seed, data set) pair the mixture experiments run: each seed on each data set."""
    return [(seed, data) for seed in seeds for data in datasets(n_synthetic, seed)]


def finite(reduce, values: list[float]) -> float:
    """`reduce` over the finite `values`; NaN when there are none."""
    kept = [v for v in values if np.isfinite(v)]
    return float(reduce(kept)) if kept else float("nan")


def poor_start(data: Dataset, seed: int, covariance_type: str = "full") -> Mixture:
    """Random data rows as means, the data's covariance for every component, uniform weights."""
    x, k = data.x, data.n_components
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(len(x), generator=generator)[:k]
    model = covariance_model(covariance_type)
    full = torch.cov(x.T).expand(k, -1, -1).clone()
    covariances = {
        "full": full,
        "tied": full[0],
        "diag": torch.diagonal(full, dim1=-2, dim2=-1).clone(),
        "spherical": torch.diagonal(full, dim1=-2, dim2=-1).mean(-1),
    }[covariance_type]
    weights = torch.full((k,), 1.0 / k, dtype=DTYPE)
    return Mixture.from_covariances(model, weights, x[rows].clone(), covariances)


def one_pass(rule, mixture: Mixture, x: Tensor) -> tuple[Mixture, float]:
    """One pass of `rule` from `mixture`: the next parameters and the mean log-likelihood at `mixture`."""
    with torch.no_grad():
        rule.begin(mixture)
        rule.accumulate(x)
        log_likelihood = float(rule.sums["log_likelihood"] / rule.sums["count"])
        stepped, _ = rule.step()
    return stepped, log_likelihood


def path(
    fitter: str,
    start: Mixture,
    x: Tensor,
    passes: int,
    learning_rate: float | None = None,
    rule: StepRule | None = None,
) -> tuple[list[Mixture], list[float], bool]:
    """`passes` steps of `fitter` (or of `rule`, when given) from `start`: parameters (start
    included), log-likelihoods at each, and whether the path diverged (then it stops at its
    last finite point)."""
    rule = make_step_rule(fitter, REG_COVAR, learning_rate) if rule is None else rule
    mixtures, log_likelihoods = [start], []
    for _ in range(passes):
        try:
            stepped, log_likelihood = one_pass(rule, mixtures[-1], x)
        except (ValueError, torch.linalg.LinAlgError):
            return mixtures, [*log_likelihoods, mean_log_likelihood(mixtures[-1], x)], True
        mixtures.append(stepped)
        log_likelihoods.append(log_likelihood)
    log_likelihoods.append(mean_log_likelihood(mixtures[-1], x))
    return mixtures, log_likelihoods, False


def em_step(mixture: Mixture, x: Tensor) -> Mixture:
    """The EM step taken from `mixture`."""
    return one_pass(make_step_rule("em", REG_COVAR, None), mixture, x)[0]


def mean_log_likelihood(mixture: Mixture, x: Tensor) -> float:
    """Mean log-likelihood per sample of `x` under `mixture` (the true Gaussian-mixture model)."""
    rule = make_step_rule("em", REG_COVAR, None)
    with torch.no_grad():
        rule.begin(mixture)
        return float(rule.accumulate(x).mean())


def gradient_norm(mixture: Mixture, x: Tensor) -> float:
    """Norm of the gradient of the mean NLL over gradient descent's parameters (logits, means,
    whitening factors): zero exactly at a stationary point of the likelihood."""
    rule = GradientRule(REG_COVAR, 1.0)
    rule.begin(mixture)
    rule.accumulate(x)
    count = rule.sums["count"]
    return float(
        sum(((rule.sums[name] / count) ** 2).sum() for name in ("logits", "means", "raw")).sqrt()
    )


def flat(mixture: Mixture) -> Tensor:
    """The natural parameters (weights, means, covariances) as one vector."""
    return torch.cat([mixture.weights.ravel(), mixture.means.ravel(), mixture.covariances.ravel()])


def permuted(mixture: Mixture, order: np.ndarray) -> Mixture:
    """`mixture` with its components reordered by `order`."""
    index = torch.as_tensor(order)
    per_component = mixture.covariances.dim() > 0 and mixture.model.per_component
    return Mixture.from_covariances(
        mixture.model,
        mixture.weights[index],
        mixture.means[index],
        mixture.covariances[index] if per_component else mixture.covariances,
    )


def matched(mixture: Mixture, reference: Mixture) -> Mixture:
    """`mixture` with its components matched to `reference`'s by their means (Hungarian)."""
    cost = torch.cdist(reference.means, mixture.means).numpy()
    _, order = linear_sum_assignment(cost)
    return permuted(mixture, order)


def max_abs(a: Mixture, b: Mixture) -> float:
    """Largest absolute difference of the natural parameters."""
    return float((flat(a) - flat(b)).abs().max())

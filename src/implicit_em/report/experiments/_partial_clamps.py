r"""E16's model, its two fitters (gradient descent on a partial clamp, explicit EM) and the rivals.

The model is a distance classifier over PCA features $z$: one prototype per class, a learned
prior and a learned covariance shared by the classes,
$d_j = \tfrac12 (z - \mu_j)^\top\Sigma^{-1}(z - \mu_j) + \tfrac12\log|\Sigma| - \log\pi_j$, so
$r = \mathrm{softmax}(-d)$ is the posterior of a Gaussian mixture with one shared covariance
(`Model`; unit variance without it). Supervision is a weight $\log w$ over the
classes per row (`implicit_em.objectives.clamped_nll`); noisy and crowd labels get their weights
from a transition matrix or confusion matrices that are learned with the model.

* `fit_gd`: Adam on the clamped objective itself (gradient $\tilde r - r$), the transition or
  confusions as parameters beside the prototypes (`TransitionNLL`, `CrowdNLL`).
* `fit_em`: explicit EM on the same model: E-step $\tilde r$ from the current model and
  supervision; M-step fits the model to $\tilde r$ (closed form, means and shared covariance,
  for the joint likelihood of the semi-supervised arm; Adam steps on the cross-entropy to $\tilde r$ otherwise) and the
  transition or confusions by their closed form (expected counts).

Rivals, each from its own library where one installs here: pseudo-labelling (Lee 2013), the
naive average over candidates and PRODEN (Lv et al., ICML 2020), generalized cross-entropy
(Zhang & Sabuncu, NeurIPS 2018), cleanlab's `CleanLearning`, and crowd-kit's `MajorityVote`,
`DawidSkene` and `GLAD`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from implicit_em import objectives
from implicit_em.distances import squared_euclidean

__all__ = [
    "Model",
    "Supervision",
    "fit_em",
    "fit_gd",
    "fit_targets",
    "generalized_ce",
    "proden",
]


class Model(nn.Module):
    r"""Prototypes $\mu$ `[K, D]`, prior logits and, with `shared_covariance`, a learned
    precision factor $A$ `[D, D]` shared by the classes ($\Sigma^{-1} = A A^\top$):
    $d_j = \tfrac12\|(z - \mu_j) A\|^2 - \log|\det A| - \log\pi_j$, so $r = \mathrm{softmax}(-d)$
    is the posterior of a Gaussian mixture with one shared covariance (without it, $A = I$:
    unit variance). `distances(z)` is $d$ `[N, K]`. A `Model` as `start` copies its parameters;
    a tensor starts the prior uniform and $A = I$."""

    def __init__(self, start: Tensor | Model, shared_covariance: bool = False) -> None:
        super().__init__()
        if isinstance(start, Model):
            prototypes, prior = start.prototypes.detach(), start.prior.detach()
            factor = None if start.factor is None else start.factor.detach()
        else:
            prototypes, prior = start, torch.zeros(len(start), dtype=start.dtype)
            factor = torch.eye(start.shape[1], dtype=start.dtype) if shared_covariance else None
        self.prototypes = nn.Parameter(prototypes.clone())
        self.prior = nn.Parameter(prior.clone())
        self.factor = None if factor is None else nn.Parameter(factor.clone())

    def distances(self, z: Tensor) -> Tensor:
        log_prior = torch.log_softmax(self.prior, 0)
        if self.factor is None:
            return 0.5 * squared_euclidean(z, self.prototypes) - log_prior
        mapped = squared_euclidean(z @ self.factor, self.prototypes @ self.factor)
        log_det = torch.linalg.slogdet(self.factor)[1]
        return 0.5 * mapped - log_det - log_prior

    def posteriors(self, z: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.softmax(-self.distances(z), dim=-1)


@dataclass(frozen=True)
class Supervision:
    r"""What one arm observes per training row.

    `kind` is `"mask"` (candidate sets; all-True rows are unlabeled; `joint` uses the joint
    likelihood, so unlabeled rows count), `"noisy"` (one label per row, transition learned) or
    `"crowd"` (`[N, A]` labels, -1 missing; confusions learned). A `known` transition `[K, K]`
    (or confusions `[A, K, K]`) is used as given instead of being learned.
    """

    kind: str
    labels: Tensor
    joint: bool = False
    known: Tensor | None = None


def _stochastic_from_counts(counts: Tensor, smoothing: float = 1.0) -> Tensor:
    counts = counts + smoothing
    return counts / counts.sum(-1, keepdim=True)


def _log_weights(supervision: Supervision, k: int, noise: Tensor | None) -> Tensor:
    """$\\log w$ `[N, K]` for the supervision, with the current transition or confusions."""
    if supervision.kind == "mask":
        mask = supervision.labels
        return torch.where(mask, 0.0, float("-inf")).to(torch.float32)
    assert noise is not None
    if supervision.kind == "noisy":
        return torch.log(noise)[:, supervision.labels].T
    return objectives.crowd_log_weights(supervision.labels, noise)


def _noise_start(supervision: Supervision, k: int, diagonal: float) -> Tensor | None:
    if supervision.kind == "mask":
        return None
    eye = torch.eye(k)
    single = eye * diagonal + (1 - eye) * (1 - diagonal) / (k - 1)
    if supervision.kind == "noisy":
        return single
    return single.expand(supervision.labels.shape[1], k, k).clone()


def _adam(parameters: list[Tensor], loss: Callable[[], Tensor], steps: int, lr: float) -> None:
    """`steps` full-batch Adam steps on `loss()`, the rate decayed from `lr` to 0 on a cosine:
    the one schedule of every fit here, ours and the rivals'."""
    optimizer = torch.optim.Adam(parameters, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()
        schedule.step()


def fit_gd(
    z: Tensor,
    supervision: Supervision,
    start: Tensor | Model,
    steps: int,
    lr: float,
    diagonal: float,
) -> tuple[Model, Tensor | None]:
    """Adam on the partial-clamp objective: the model and the learned transition/confusions."""
    model = Model(start)
    k = len(model.prototypes)
    noise = _noise_start(supervision, k, diagonal)
    learned = noise is not None and supervision.known is None
    noise_logits = nn.Parameter(torch.log(noise)) if learned else None
    parameters = [*model.parameters(), *([] if noise_logits is None else [noise_logits])]

    def loss() -> Tensor:
        current = supervision.known if noise_logits is None else torch.softmax(noise_logits, -1)
        log_w = _log_weights(supervision, k, current)
        return objectives.clamped_nll(model.distances(z), log_w, conditional=not supervision.joint)

    _adam(parameters, loss, steps, lr)
    final = supervision.known if noise_logits is None else torch.softmax(noise_logits.detach(), -1)
    return model, final


def fit_targets(z: Tensor, targets: Tensor, start: Tensor | Model, steps: int, lr: float) -> Model:
    """The model fitted to soft (or one-hot) targets by cross-entropy: an M-step, and the way
    every rival that produces labels trains the same model."""
    model = Model(start)

    def loss() -> Tensor:
        return objectives.cross_entropy(model.distances(z), targets)

    _adam(list(model.parameters()), loss, steps, lr)
    return model


def _closed_form_m_step(z: Tensor, posterior: Tensor) -> Tensor:
    """Means of the joint (generative) M-step: responsibility-weighted averages."""
    weight = posterior.sum(0).clamp_min(1e-12)
    return (posterior.T @ z) / weight[:, None]


def _closed_form_factor(z: Tensor, posterior: Tensor, means: Tensor) -> Tensor:
    r"""The shared covariance of the joint M-step, $\Sigma = \frac1N\sum_{n,j} r_{nj}
    (z_n - \mu_j)(z_n - \mu_j)^\top$ (plus $10^{-4} I$), as its precision factor $A$ with
    $A A^\top = \Sigma^{-1}$ (lower Cholesky)."""
    centred = z[:, None, :] - means[None]
    covariance = torch.einsum("nj,nja,njb->ab", posterior, centred, centred) / len(z)
    covariance = covariance + 1e-4 * torch.eye(z.shape[1], dtype=z.dtype)
    return torch.linalg.cholesky(torch.linalg.inv(covariance))


def fit_em(
    z: Tensor,
    supervision: Supervision,
    start: Tensor | Model,
    iterations: int,
    m_steps: int,
    lr: float,
    diagonal: float,
) -> tuple[Model, Tensor | None]:
    """Explicit EM on the same model and supervision (see the module docstring)."""
    model = Model(start)
    k = len(model.prototypes)
    noise = _noise_start(supervision, k, diagonal)
    if supervision.known is not None:
        noise = supervision.known
    for _ in range(iterations):
        with torch.no_grad():
            log_w = _log_weights(supervision, k, noise)
            posterior = objectives.clamped_responsibilities(model.distances(z), log_w)
        if supervision.joint:
            model.prototypes.data = _closed_form_m_step(z, posterior)
            model.prior.data = torch.log(posterior.mean(0).clamp_min(1e-12))
            if model.factor is not None:
                model.factor.data = _closed_form_factor(z, posterior, model.prototypes.data)
        else:
            model = fit_targets(z, posterior, model, m_steps, lr)
        if supervision.known is not None:
            continue
        if supervision.kind == "noisy":
            onehot = torch.nn.functional.one_hot(supervision.labels, k).to(posterior.dtype)
            noise = _stochastic_from_counts(posterior.T @ onehot)
        elif supervision.kind == "crowd":
            labels = supervision.labels
            onehot = torch.nn.functional.one_hot(labels.clamp_min(0), k).to(posterior.dtype)
            onehot = onehot * (labels >= 0).unsqueeze(-1)
            noise = _stochastic_from_counts(torch.einsum("nj,nal->ajl", posterior, onehot))
    return model, noise


def proden(
    z: Tensor, candidates: Tensor, start: Tensor | Model, epochs: int, steps: int, lr: float
) -> Model:
    r"""PRODEN (Lv et al., ICML 2020): cross-entropy to weights over the candidates, the weights
    re-estimated after each epoch as the model's confidence renormalized over the candidate set,
    $w_{nj} = r_{nj} 1[j \in S_n] / \sum_{k \in S_n} r_{nk}$, from uniform weights."""
    weights = candidates.float() / candidates.sum(-1, keepdim=True)
    model = fit_targets(z, weights, start, steps, lr)
    for _ in range(epochs - 1):
        r = model.posteriors(z) * candidates
        weights = r / r.sum(-1, keepdim=True).clamp_min(1e-30)
        model = fit_targets(z, weights, model, steps, lr)
    return model


def generalized_ce(
    z: Tensor, labels: Tensor, start: Tensor | Model, steps: int, lr: float, q: float = 0.7
) -> Model:
    r"""Generalized cross-entropy (Zhang & Sabuncu, NeurIPS 2018): $(1 - p_y^q)/q$, between
    cross-entropy ($q \to 0$) and the mean absolute error ($q = 1$)."""
    model = Model(start)

    def loss() -> Tensor:
        log_p = torch.log_softmax(-model.distances(z), -1).gather(1, labels[:, None])
        return ((1 - torch.exp(q * log_p)) / q).mean()

    _adam(list(model.parameters()), loss, steps, lr)
    return model


def accuracy(model_or_labels: Model | Tensor, z: Tensor, y: Tensor) -> float:
    """Accuracy of a model's argmax posterior on `(z, y)`."""
    predicted = (
        model_or_labels.posteriors(z).argmax(-1)
        if isinstance(model_or_labels, Model)
        else model_or_labels
    )
    return float((predicted == y).float().mean())


def agreement(a: Model, b: Model, z: Tensor) -> float:
    """The share of the rows of `z` on which two models' posteriors put their largest mass on
    the same class."""
    return float((a.posteriors(z).argmax(-1) == b.posteriors(z).argmax(-1)).float().mean())


def posterior_overlap(a: Model, b: Model, z: Tensor) -> float:
    """$1 - $ the mean total-variation distance between two models' posteriors on `z`."""
    return 1.0 - 0.5 * float((a.posteriors(z) - b.posteriors(z)).abs().sum(-1).mean())

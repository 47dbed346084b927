r"""Partial clamps: imperfect supervision as a weight over the classes (C14b).

A hard label fixes the responsibilities: the class is known. Imperfect supervision says less: it
gives each class $j$ a weight $w_j \ge 0$, the likelihood of what was observed (a candidate set, a
soft label, a noisy label, several annotators' labels) if the true class were $j$. The loss of the
whole family is the negative log-probability of the observation,

$$\ell(d) = -\log \sum_j w_j\, e^{-d_j} + \log \sum_j e^{-d_j} = -\log \sum_j w_j\, r_j,$$

and its gradient is the clamped minus the free responsibilities,

$$\frac{\partial \ell}{\partial d_j} = \tilde r_j - r_j, \qquad
\tilde r_j = \frac{w_j\, e^{-d_j}}{\sum_k w_k\, e^{-d_k}}, \qquad r_j = \mathrm{softmax}(-d)_j.$$

$\tilde r$ is the posterior over the true class given the input *and* the observation: the
E-step of EM with the supervision as evidence. A gradient step therefore moves each class's
responsibility toward its clamped value, by as much as the supervision pins it down. The special
cases, each a function here and a thin module:

| observation                       | weight $w_j$                                    | function                 |
| --------------------------------- | ----------------------------------------------- | ------------------------ |
| a hard label $y$                  | $1[j=y]$ (cross-entropy)                        | [candidate_set_nll][]    |
| a candidate set $S$ (partial)     | $1[j\in S]$                                     | [candidate_set_nll][]    |
| no label (unlabeled)              | $1$ for every class: $\ell = 0$, no gradient    | [candidate_set_nll][]    |
| a soft label $t$ (as evidence)    | $t_j$                                           | [soft_label_nll][]       |
| a noisy label $\tilde y$          | $T_{j\tilde y}$, $T$ the transition matrix      | [transition_nll][]       |
| labels $y_a$ of annotators $a$    | $\prod_a \pi^{(a)}_{j y_a}$ (Dawid & Skene)     | [crowd_nll][]            |

Under this conditional likelihood an unlabeled row carries no information and contributes
nothing; semi-supervised learning gets its signal from unlabeled rows through a joint
(generative) likelihood instead: with `conditional=False` the normalizer is dropped,
$\ell = -\log\sum_j w_j e^{-d_j}$ with gradient $+\tilde r_j$, which is the mixture NLL
([mixture_nll][]) on an unlabeled row and $d_y$ on a labelled one.

Note the difference from cross-entropy with a soft target $t$ ([cross_entropy][]), whose gradient
$t_j - r_j$ clamps the responsibilities to $t$ whatever the model says: here $t$ is evidence,
combined with the model's $r$ by Bayes' rule.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from implicit_em.core import check_component_axis
from implicit_em.hook_points import hook_point
from implicit_em.objectives._reduction import Reduction, reduce

__all__ = [
    "CandidateSetNLL",
    "CrowdNLL",
    "SoftLabelNLL",
    "TransitionNLL",
    "candidate_set_nll",
    "clamped_nll",
    "clamped_responsibilities",
    "crowd_log_weights",
    "crowd_nll",
    "soft_label_nll",
    "transition_nll",
]


def _check_log_weights(d: Tensor, log_weights: Tensor, dim: int) -> None:
    if log_weights.shape != d.shape:
        raise ValueError(
            f"the weights must have d's shape {tuple(d.shape)}, got {tuple(log_weights.shape)}"
        )
    if bool(torch.isnan(log_weights).any()):
        raise ValueError("the weights must not hold NaN")
    if bool((log_weights == float("inf")).any()):
        raise ValueError("the weights must be finite")
    if bool((log_weights == float("-inf")).all(dim=dim).any()):
        raise ValueError(
            "every row needs a class of positive weight (an empty candidate set, or an "
            "observation impossible under every class)"
        )


def clamped_nll(
    d: Tensor,
    log_weights: Tensor,
    conditional: bool = True,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""The partial-clamp loss $-\log\sum_j w_j e^{-d_j} + \log\sum_j e^{-d_j}$.

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    log_weights : Tensor
        $\log w_j$, of `d`'s shape; $-\infty$ excludes a class. Each row needs one finite entry.
    conditional : bool, default=True
        With the normalizer ($-\log\sum_j w_j r_j$, the conditional likelihood, gradient
        $\tilde r - r$); without it ($-\log\sum_j w_j e^{-d_j}$, the joint, gradient $+\tilde r$).
    dim : int, default=-1
        The component axis.
    reduction : {"mean", "sum", "none"}, default="mean"

    Returns
    -------
    Tensor
        The loss: a scalar, or per row with `reduction="none"`.

    Raises
    ------
    ValueError
        If `log_weights` does not have `d`'s shape, holds NaN or $+\infty$, or a row has no
        class of positive weight.

    Notes
    -----
    Gradient per row: $\partial/\partial d_j = \tilde r_j - r_j$ (conditional) or $\tilde r_j$
    (joint), with $\tilde r$ = [clamped_responsibilities][].
    """
    dim = check_component_axis(d, dim)
    _check_log_weights(d, log_weights, dim)
    loss = -torch.logsumexp(log_weights.to(d.dtype) - d, dim=dim)
    if conditional:
        loss = loss + torch.logsumexp(-d, dim=dim)
    hook_point("partial_clamp", loss, d=d, log_weights=log_weights, dim=dim)
    return reduce(loss, reduction)


def clamped_responsibilities(d: Tensor, log_weights: Tensor, dim: int = -1) -> Tensor:
    r"""$\tilde r_j = w_j e^{-d_j} / \sum_k w_k e^{-d_k}$: the posterior over the true class
    given the input and the observation (EM's E-step with the supervision as evidence)."""
    dim = check_component_axis(d, dim)
    _check_log_weights(d, log_weights, dim)
    return torch.softmax(log_weights.to(d.dtype) - d, dim=dim)


def _log_mask(d: Tensor, candidates: Tensor) -> Tensor:
    if candidates.dtype != torch.bool:
        raise TypeError(f"candidates must be a boolean mask, got dtype {candidates.dtype}")
    if candidates.shape != d.shape:
        raise ValueError(
            f"candidates must have d's shape {tuple(d.shape)}, got {tuple(candidates.shape)}"
        )
    zero = torch.zeros((), dtype=d.dtype, device=d.device)
    return torch.where(candidates, zero, torch.full_like(d, float("-inf")))


def candidate_set_nll(
    d: Tensor,
    candidates: Tensor,
    conditional: bool = True,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Partial labels: $-\log\sum_{j\in S} r_j$ for the candidate set $S$ (a boolean mask).

    A one-class set is a hard label (cross-entropy); the set of all classes is an unlabeled
    row (loss 0 when `conditional`; the mixture NLL when not). Gradient $\tilde r_j - r_j$ with
    $\tilde r$ the responsibilities renormalized over $S$. See [clamped_nll][].

    Raises
    ------
    TypeError
        If `candidates` is not boolean.
    ValueError
        If `candidates` does not have `d`'s shape or a row's set is empty.
    """
    return clamped_nll(d, _log_mask(d, candidates), conditional, dim, reduction)


def soft_label_nll(
    d: Tensor,
    target: Tensor,
    conditional: bool = True,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""A soft label as evidence: $-\log\sum_j t_j r_j$, with $t$ non-negative (zeros exclude
    a class; it need not sum to 1, only its ratios matter). Gradient $\tilde r_j - r_j$ with
    $\tilde r_j \propto t_j r_j$. See [clamped_nll][].

    Raises
    ------
    ValueError
        If `target` does not have `d`'s shape, has a negative entry, or a row is all zero.
    """
    if target.shape != d.shape:
        raise ValueError(f"target must have d's shape {tuple(d.shape)}, got {tuple(target.shape)}")
    if bool((target < 0).any()):
        raise ValueError("target must be non-negative")
    return clamped_nll(d, torch.log(target.to(d.dtype)), conditional, dim, reduction)


def _check_stochastic(name: str, matrix: Tensor, k: int) -> None:
    if matrix.shape[-2:] != (k, k):
        raise ValueError(
            f"{name} must be [..., {k}, {k}] for {k} classes, got {tuple(matrix.shape)}"
        )
    if bool((matrix < 0).any()):
        raise ValueError(f"{name} must be non-negative (row j: P(observed label | true class j))")


def _check_labels(name: str, labels: Tensor, k: int, missing_allowed: bool) -> None:
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer class indices, got dtype {labels.dtype}")
    low = -1 if missing_allowed else 0
    if labels.numel() and (int(labels.min()) < low or int(labels.max()) >= k):
        raise ValueError(
            f"{name} must lie in [{low}, {k - 1}]"
            + (" (-1: this annotator gave no label)" if missing_allowed else "")
            + f", got range [{int(labels.min())}, {int(labels.max())}]"
        )


def transition_nll(
    d: Tensor,
    noisy_label: Tensor,
    transition: Tensor,
    conditional: bool = True,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Noisy labels: $-\log\sum_j T_{j\tilde y} r_j$, with $T_{jl} = P(\tilde y = l \mid y = j)$.

    Parameters
    ----------
    d : Tensor
        Distances `[N, K]`.
    noisy_label : Tensor
        The observed labels `[N]`, integer class indices.
    transition : Tensor
        $T$, `[K, K]`, row $j$ the distribution of the observed label for true class $j$. Fixed,
        or learned through [TransitionNLL][] (differentiable here).
    conditional : bool, default=True
        As in [clamped_nll][].
    reduction : {"mean", "sum", "none"}, default="mean"

    Notes
    -----
    Gradient $\partial/\partial d_j = \tilde r_j - r_j$, $\tilde r_j \propto T_{j\tilde y} r_j$:
    the posterior over the true class given the noisy label.
    """
    check_component_axis(d, -1)
    if d.dim() != 2:
        raise ValueError(f"d must be [N, K], got shape {tuple(d.shape)}")
    k = d.shape[-1]
    _check_stochastic("transition", transition, k)
    _check_labels("noisy_label", noisy_label, k, missing_allowed=False)
    log_weights = torch.log(transition.to(d.dtype))[:, noisy_label.long()].T
    return clamped_nll(d, log_weights, conditional, -1, reduction)


def crowd_log_weights(annotations: Tensor, confusions: Tensor) -> Tensor:
    r"""$\log w_j = \sum_a \log \pi^{(a)}_{j y_a}$ over the annotators $a$ who labelled the row
    (Dawid & Skene 1979), `[N, K]`.

    Parameters
    ----------
    annotations : Tensor
        `[N, A]` integer labels, -1 where annotator $a$ gave none.
    confusions : Tensor
        `[A, K, K]`, $\pi^{(a)}_{jl} = P(\text{annotator } a \text{ says } l \mid \text{true } j)$.
    """
    a, k = confusions.shape[0], confusions.shape[-1]
    _check_stochastic("confusions", confusions, k)
    _check_labels("annotations", annotations, k, missing_allowed=True)
    if annotations.dim() != 2 or annotations.shape[1] != a:
        raise ValueError(
            f"annotations must be [N, {a}] for {a} annotators' confusions, got "
            f"{tuple(annotations.shape)}"
        )
    given = annotations >= 0
    index = annotations.clamp_min(0).long()  # [N, A]
    log_pi = torch.log(confusions)  # [A, K, K]
    # log pi^(a)[j, y_a] for every row, annotator and true class j: [N, A, K]
    per = log_pi.permute(0, 2, 1)[torch.arange(a), index]
    return torch.where(given.unsqueeze(-1), per, torch.zeros_like(per)).sum(dim=1)


def crowd_nll(
    d: Tensor,
    annotations: Tensor,
    confusions: Tensor,
    conditional: bool = True,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Crowd labels: $-\log\sum_j \big(\prod_a \pi^{(a)}_{j y_a}\big) r_j$ (Dawid & Skene).

    `annotations` `[N, A]` (-1: no label from that annotator), `confusions` `[A, K, K]`, fixed
    or learned through [CrowdNLL][]. Gradient $\tilde r_j - r_j$ with
    $\tilde r_j \propto r_j \prod_a \pi^{(a)}_{j y_a}$, the posterior over the true class
    given every annotator's label. See [crowd_log_weights][].
    """
    check_component_axis(d, -1)
    if d.dim() != 2:
        raise ValueError(f"d must be [N, K], got shape {tuple(d.shape)}")
    log_weights = crowd_log_weights(annotations, confusions.to(d.dtype))
    if log_weights.shape != d.shape:
        raise ValueError(
            f"confusions are over {log_weights.shape[-1]} classes, d over {d.shape[-1]}"
        )
    return clamped_nll(d, log_weights, conditional, -1, reduction)


class CandidateSetNLL(nn.Module):
    """Module form of [candidate_set_nll][]: `forward(d, candidates)`."""

    def __init__(self, conditional: bool = True, reduction: Reduction = "mean") -> None:
        super().__init__()
        self.conditional = conditional
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor, candidates: Tensor) -> Tensor:
        return candidate_set_nll(d, candidates, self.conditional, reduction=self.reduction)


class SoftLabelNLL(nn.Module):
    """Module form of [soft_label_nll][]: `forward(d, target)`."""

    def __init__(self, conditional: bool = True, reduction: Reduction = "mean") -> None:
        super().__init__()
        self.conditional = conditional
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor, target: Tensor) -> Tensor:
        return soft_label_nll(d, target, self.conditional, reduction=self.reduction)


def _stochastic_logits(shape: tuple[int, ...], k: int, diagonal: float) -> Tensor:
    """Logits whose row-softmax puts `diagonal` on the diagonal, the rest spread evenly."""
    off = (1.0 - diagonal) / (k - 1)
    eye = torch.eye(k)
    logits = torch.log(eye * diagonal + (1 - eye) * off)
    return logits.expand(*shape, k, k).clone()


class TransitionNLL(nn.Module):
    r"""Module form of [transition_nll][] with $T$ learned: $T = \mathrm{softmax}(\Lambda)$ row by
    row, started at `diagonal` on the diagonal (or at `transition` when given, and then fixed
    unless `learn`).

    Parameters
    ----------
    num_classes : int
    diagonal : float, default=0.9
        The starting $P(\tilde y = y)$ when `transition` is None.
    transition : Tensor, optional
        A known `[K, K]` transition matrix.
    learn : bool, default=True
        Whether $T$ is a parameter (estimated jointly with the model) or a fixed buffer.
    conditional : bool, default=True
        As in [clamped_nll][].
    reduction : {"mean", "sum", "none"}, default="mean"
    """

    def __init__(
        self,
        num_classes: int,
        diagonal: float = 0.9,
        transition: Tensor | None = None,
        learn: bool = True,
        conditional: bool = True,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {num_classes}")
        if not 0.0 < diagonal < 1.0:
            raise ValueError(f"diagonal must be in (0, 1), got {diagonal}")
        if transition is None:
            logits = _stochastic_logits((), num_classes, diagonal)
        else:
            _check_stochastic("transition", transition, num_classes)
            logits = torch.log(transition / transition.sum(-1, keepdim=True))
        if learn:
            self.logits = nn.Parameter(logits)
        else:
            self.register_buffer("logits", logits)
        self.conditional = conditional
        self.reduction: Reduction = reduction

    @property
    def transition(self) -> Tensor:
        """$T$, `[K, K]`, rows summing to 1."""
        return torch.softmax(self.logits, dim=-1)

    def forward(self, d: Tensor, noisy_label: Tensor) -> Tensor:
        return transition_nll(
            d, noisy_label, self.transition, self.conditional, reduction=self.reduction
        )


class CrowdNLL(nn.Module):
    r"""Module form of [crowd_nll][] with each annotator's confusion matrix learned
    (row-softmax of logits, started at `diagonal` on the diagonal): the Dawid–Skene model fitted
    by gradient descent jointly with the classifier.

    Parameters
    ----------
    num_annotators, num_classes : int
    diagonal : float, default=0.7
        The starting $P(\text{annotator says } j \mid \text{true } j)$.
    conditional : bool, default=True
        As in [clamped_nll][].
    reduction : {"mean", "sum", "none"}, default="mean"
    """

    def __init__(
        self,
        num_annotators: int,
        num_classes: int,
        diagonal: float = 0.7,
        conditional: bool = True,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        if num_annotators < 1 or num_classes < 2:
            raise ValueError(
                f"need at least 1 annotator and 2 classes, got {num_annotators} and {num_classes}"
            )
        if not 0.0 < diagonal < 1.0:
            raise ValueError(f"diagonal must be in (0, 1), got {diagonal}")
        self.logits = nn.Parameter(_stochastic_logits((num_annotators,), num_classes, diagonal))
        self.conditional = conditional
        self.reduction: Reduction = reduction

    @property
    def confusions(self) -> Tensor:
        """$\\pi$, `[A, K, K]`, rows summing to 1."""
        return torch.softmax(self.logits, dim=-1)

    def forward(self, d: Tensor, annotations: Tensor) -> Tensor:
        return crowd_nll(
            d, annotations, self.confusions, self.conditional, reduction=self.reduction
        )

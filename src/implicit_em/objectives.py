r"""Objectives over distances: each a pure function plus a thin `nn.Module`.

Every objective takes distances `d` with the component axis at `dim` and is *minimized*.
Its gradient with respect to `d` is stated per sample (before the batch reduction); a `"mean"`
reduction divides it by the number of samples.

| objective           | per-sample loss                               | $\partial/\partial d_j$                          |
| ------------------- | --------------------------------------------- | ------------------------------------------------ |
| [mixture_nll][]     | $-\log\sum_j \pi_j e^{-d_j + v_j}$            | $+r_j$                                           |
| [cross_entropy][]   | $d_y + \log\sum_k e^{-d_k}$                   | $t_j - r_j$                                      |
| [correntropy][]     | $\sum_j 1 - e^{-d_j^2/\sigma^2}$              | $\tfrac{2d_j}{\sigma^2}e^{-d_j^2/\sigma^2}$      |
| [sigmoid_bce][]     | $\sum_j \mathrm{BCE}(\sigma(-d_j), t_j)$      | $t_j - \sigma(-d_j)$                             |

Normalized objectives (the first two) couple the components through $r$; the
unnormalized comparators (the last two) have a diagonal Hessian in `d`: no competition, no
responsibility (claims C7, C8). [append_null][] adds a "none of the above" component that
works with both normalized objectives, and [variance_penalty][] /
[decorrelation_penalty][] are the batch surrogates of the missing log-det volume term (C9).

Examples
--------
>>> import torch
>>> from implicit_em import objectives, responsibilities
>>> d = torch.rand(4, 3, requires_grad=True)
>>> (grad,) = torch.autograd.grad(objectives.mixture_nll(d, reduction="sum"), d)
>>> torch.allclose(grad, responsibilities(d.detach()))
True
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from implicit_em.core import check_component_axis, log_responsibilities, lse
from implicit_em.hook_points import hook_point

__all__ = [
    "CorrentropyLoss",
    "CrossEntropy",
    "MixtureNLL",
    "NullComponent",
    "SigmoidBCE",
    "VolumeSurrogate",
    "append_null",
    "correntropy",
    "cross_entropy",
    "decorrelation_penalty",
    "mixture_nll",
    "null_responsibility",
    "sigmoid_bce",
    "soft_targets",
    "variance_penalty",
]

Reduction = Literal["mean", "sum", "none"]


def _reduce(loss: Tensor, reduction: Reduction) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_volume(log_det: Tensor | None, d: Tensor) -> None:
    if log_det is None:
        return
    if not isinstance(log_det, Tensor) or not log_det.is_floating_point():
        raise TypeError("log_det must be a floating torch.Tensor of per-component log|det W_j|")
    try:
        shape = torch.broadcast_shapes(log_det.shape, d.shape)
    except RuntimeError:
        shape = None
    if shape != d.shape:
        raise ValueError(
            f"log_det with shape {tuple(log_det.shape)} must broadcast to d's shape "
            f"{tuple(d.shape)} (one log|det W_j| per component)"
        )


# ---------------------------------------------------------------------------------------------
# The unsupervised regime
# ---------------------------------------------------------------------------------------------


def mixture_nll(
    d: Tensor,
    log_prior: Tensor | None = None,
    log_det: Tensor | None = None,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Mixture negative log-likelihood $-\log\sum_j \pi_j \exp(-d_j + \log|\det W_j|)$.

    With $d_j = \tfrac12\lVert W_j(x-\mu_j)\rVert^2$ (a whitened Gaussian component, see
    [implicit_em.distances][]) and the volume term `log_det` this is the Gaussian mixture
    NLL up to the constant $\tfrac D2\log 2\pi$; without `log_det` it is the paper's
    objective $-L$, which has no volume term (m1).

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    log_prior : Tensor or None, default=None
        Log mixing weights $\log\pi$ broadcastable to `d`; uniform if None.
    log_det : Tensor or None, default=None
        Per-component $\log|\det W_j|$, broadcastable to `d`.
    dim : int, default=-1
        The component axis.
    reduction : {"mean", "sum", "none"}, default="mean"
        Reduction over the remaining axes.

    Returns
    -------
    Tensor
        The loss: a scalar, or per sample with `reduction="none"`.

    Raises
    ------
    TypeError
        If `d`, `log_prior` or `log_det` is not a floating tensor.
    ValueError
        If `dim` is out of range, the component axis is empty, `log_prior` or `log_det` does
        not broadcast to `d`'s shape, or `reduction` is unknown.

    Notes
    -----
    Gradient per sample, with $r_j \propto \pi_j e^{-d_j + \log|\det W_j|}$:

    $$
    \frac{\partial}{\partial d_j} = +r_j, \qquad
    \frac{\partial}{\partial \log|\det W_j|} = -r_j, \qquad
    \frac{\partial}{\partial \log\pi_j} = -r_j ,
    $$

    the first with the sign of the minimized objective (R4).
    """
    dim = check_component_axis(d, dim)
    _check_volume(log_det, d)
    energy = d if log_det is None else d - log_det
    loss = -lse(energy, dim=dim, log_prior=log_prior)
    hook_point("mixture_nll", loss, d=d, log_prior=log_prior, log_det=log_det, dim=dim)
    return _reduce(loss, reduction)


class MixtureNLL(nn.Module):
    r"""Module form of [mixture_nll][] holding the mixing weights.

    `forward(d, log_det=None)` returns `mixture_nll(d, log_prior=self.log_prior(), log_det=log_det)`.

    Parameters
    ----------
    n_components : int
        $K$.
    log_prior : Tensor or None, default=None
        Initial log weights, `[K]` (normalized on use); uniform if None.
    learnable_prior : bool, default=False
        If True the weights are a parameter, normalized by `log_softmax` so that $\pi$ stays
        on the simplex; its gradient is $\partial/\partial\,\mathrm{logits}_j = \pi_j - r_j$
        per sample.
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [mixture_nll][].

    Raises
    ------
    ValueError
        If `n_components` < 1 or `log_prior` is not of shape `[K]`.
    """

    def __init__(
        self,
        n_components: int,
        log_prior: Tensor | None = None,
        learnable_prior: bool = False,
        reduction: Reduction = "mean",
    ) -> None:
        super().__init__()
        if n_components < 1:
            raise ValueError(f"n_components must be >= 1, got {n_components}")
        logits = torch.zeros(n_components) if log_prior is None else log_prior.detach().clone()
        if logits.shape != (n_components,):
            raise ValueError(
                f"log_prior must have shape ({n_components},), got {tuple(logits.shape)}"
            )
        if learnable_prior:
            self.prior_logits = nn.Parameter(logits)
        else:
            self.register_buffer("prior_logits", logits)
        self.reduction: Reduction = reduction

    def log_prior(self) -> Tensor:
        r"""The normalized log mixing weights $\log\pi$, shape `[K]`."""
        return torch.log_softmax(self.prior_logits, dim=-1)

    def forward(self, d: Tensor, log_det: Tensor | None = None) -> Tensor:
        log_prior = self.log_prior().to(d.dtype)
        return mixture_nll(d, log_prior=log_prior, log_det=log_det, reduction=self.reduction)


# ---------------------------------------------------------------------------------------------
# The constrained regime
# ---------------------------------------------------------------------------------------------


def soft_targets(d: Tensor, target: Tensor, label_smoothing: float = 0.0, dim: int = -1) -> Tensor:
    r"""The target distribution $t$ used by [cross_entropy][], shaped like `d`.

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    target : Tensor
        Integer class indices (`d`'s shape without `dim`) or a probability tensor of `d`'s
        shape.
    label_smoothing : float, default=0.0
        $\varepsilon \in [0, 1]$: the target is mixed with the uniform distribution,
        $t \leftarrow (1-\varepsilon)\,t + \varepsilon/K$.
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        $t$, of `d`'s shape and dtype.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor or `target` is neither class indices nor probabilities.
    ValueError
        If `label_smoothing` is outside $[0, 1]$, class indices are out of range, or a soft
        target has the wrong shape, a negative entry or does not sum to 1.
    """
    dim = check_component_axis(d, dim)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    k = d.shape[dim]
    if not isinstance(target, Tensor):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.is_floating_point():
        if target.shape != d.shape:
            raise ValueError(
                f"soft target must have d's shape {tuple(d.shape)}, got {tuple(target.shape)}"
            )
        if bool((target < 0).any()):
            raise ValueError("soft target must be non-negative (a probability vector per sample)")
        total = target.sum(dim=dim)
        if not torch.allclose(total, torch.ones_like(total), atol=1e-3):
            raise ValueError("soft target must sum to 1 along the component axis")
        t = target.to(d.dtype)
    else:
        if target.dtype == torch.bool or target.is_complex():
            raise TypeError(f"target must hold integer class indices, got dtype {target.dtype}")
        expected = d.shape[:dim] + d.shape[dim + 1 :]
        if target.shape != expected:
            raise ValueError(
                f"class-index target must have shape {tuple(expected)} (d's shape without the "
                f"component axis), got {tuple(target.shape)}"
            )
        if target.numel() and (int(target.min()) < 0 or int(target.max()) >= k):
            raise ValueError(
                f"target class indices must lie in [0, {k - 1}], got range "
                f"[{int(target.min())}, {int(target.max())}]"
            )
        t = torch.zeros_like(d).scatter_(dim, target.long().unsqueeze(dim), 1.0)
    if label_smoothing:
        t = (1.0 - label_smoothing) * t + label_smoothing / k
    return t


def cross_entropy(
    d: Tensor,
    target: Tensor,
    label_smoothing: float = 0.0,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Cross-entropy over distances $-\sum_j t_j\log r_j$, for a label $d_y + \log\sum_k e^{-d_k}$.

    The constrained regime: supervision clamps the target's responsibility while the wrong
    classes still compete through $r$ (C6). Equal to
    `F.cross_entropy(-d, target, label_smoothing=...)`.

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    target : Tensor
        Class indices (`d`'s shape without `dim`) or probabilities (`d`'s shape).
    label_smoothing : float, default=0.0
        $\varepsilon \in [0, 1]$ (a partial clamp, C14).
    dim : int, default=-1
        The component axis.
    reduction : {"mean", "sum", "none"}, default="mean"
        Reduction over the remaining axes.

    Returns
    -------
    Tensor
        The loss: a scalar, or per sample with `reduction="none"`.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor or `target` is neither class indices nor probabilities.
    ValueError
        If the target does not fit `d` (see [soft_targets][]) or `reduction` is unknown.

    Notes
    -----
    Gradient per sample: $\partial/\partial d_j = t_j - r_j$; for a hard label
    $1[j=y] - r_j$ (R4). Components with $d_j=+\infty$ and $t_j = 0$ contribute 0.
    """
    dim = check_component_axis(d, dim)
    t = soft_targets(d, target, label_smoothing, dim)
    log_r = log_responsibilities(d, dim=dim)
    # t_j log r_j with the convention 0 log 0 = 0 (also 0 * -inf for excluded components).
    safe_log_r = torch.where(t > 0, log_r, torch.zeros_like(log_r))
    loss = -(t * safe_log_r).sum(dim=dim)
    hook_point("cross_entropy", loss, d=d, target=t, dim=dim)
    return _reduce(loss, reduction)


class CrossEntropy(nn.Module):
    r"""Module form of [cross_entropy][]: `forward(d, target)`.

    Parameters
    ----------
    label_smoothing : float, default=0.0
        As in [cross_entropy][].
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [cross_entropy][].

    Raises
    ------
    ValueError
        If `label_smoothing` is outside $[0, 1]$.
    """

    def __init__(self, label_smoothing: float = 0.0, reduction: Reduction = "mean") -> None:
        super().__init__()
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor, target: Tensor) -> Tensor:
        return cross_entropy(d, target, self.label_smoothing, reduction=self.reduction)


# ---------------------------------------------------------------------------------------------
# The null ("none of the above") component
# ---------------------------------------------------------------------------------------------


def append_null(d: Tensor, d0: Tensor | float, dim: int = -1) -> Tensor:
    r"""Append a null component with distance $d_0$ as the last component (index $K$).

    The extended distances $[d_1, \dots, d_K, d_0]$ go into [mixture_nll][] (the
    unsupervised regime: $\partial/\partial d_0 = +r_0$) or [cross_entropy][] with
    class index $K$ meaning "none of the above" (the constrained regime:
    $\partial/\partial d_0 = 1[y=K] - r_0$).

    Parameters
    ----------
    d : Tensor
        Distances of the real components, component axis at `dim`.
    d0 : Tensor or float
        The null distance: a scalar, or broadcastable to `d` without the component axis (a
        per-input threshold).
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        `d` with one more component along `dim`.

    Raises
    ------
    TypeError
        If `d` or `d0` is not floating.
    ValueError
        If `d0` does not broadcast to `d`'s batch shape.
    """
    dim = check_component_axis(d, dim)
    d0 = torch.as_tensor(d0, dtype=d.dtype, device=d.device)
    if not d0.is_floating_point():
        raise TypeError(f"d0 must be a float distance, got dtype {d0.dtype}")
    batch_shape = d.shape[:dim] + d.shape[dim + 1 :]
    try:
        null = torch.broadcast_to(d0, batch_shape).unsqueeze(dim)
    except RuntimeError as err:
        raise ValueError(
            f"d0 with shape {tuple(d0.shape)} does not broadcast to d's batch shape "
            f"{tuple(batch_shape)}"
        ) from err
    return torch.cat([d, null], dim=dim)


def null_responsibility(
    d: Tensor, d0: Tensor | float, log_prior: Tensor | None = None, dim: int = -1
) -> Tensor:
    r"""Rejection responsibility $r_0 = e^{-d_0} / (e^{-d_0} + \sum_j \pi_j e^{-d_j})$.

    Equivalently $r_0 = \sigma(-d_0 - L(d))$ with $L$ the [lse][implicit_em.core.lse]
    of the real components: the input is rejected when no component explains it better than the
    threshold $d_0$ (the open-set answer to C10).

    Parameters
    ----------
    d : Tensor
        Distances of the real components, component axis at `dim`.
    d0 : Tensor or float
        The null distance, broadcastable to `d` without the component axis.
    log_prior : Tensor or None, default=None
        Log mixing weights of the real components, broadcastable to `d`.
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        $r_0$, of `d`'s shape without the component axis.
        Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `dim` is out of range or the component axis is empty.
    """
    dim = check_component_axis(d, dim)
    d0 = torch.as_tensor(d0, dtype=d.dtype, device=d.device)
    return torch.sigmoid(-d0 - lse(d, dim=dim, log_prior=log_prior))


class NullComponent(nn.Module):
    r"""A "none of the above" component with fixed or learnable distance $d_0$.

    `forward(d)` returns [append_null][] of `d` (index $K$ is the null component), so it
    composes with [MixtureNLL][] and [CrossEntropy][]; [responsibility][] gives
    $r_0$. The learnable distance receives $\partial/\partial d_0 = +r_0$ under the
    mixture NLL and $1[y=K] - r_0$ under cross-entropy.

    Parameters
    ----------
    d0 : float, default=0.0
        The initial null distance.
    learnable : bool, default=True
        Make $d_0$ a parameter (otherwise a buffer).
    """

    def __init__(self, d0: float = 0.0, learnable: bool = True) -> None:
        super().__init__()
        value = torch.tensor(float(d0))
        if learnable:
            self.d0 = nn.Parameter(value)
        else:
            self.register_buffer("d0", value)

    def forward(self, d: Tensor) -> Tensor:
        return append_null(d, self.d0.to(d.dtype))

    def responsibility(self, d: Tensor, log_prior: Tensor | None = None) -> Tensor:
        """The rejection responsibility $r_0$ for distances `d` of the real components.

        See [null_responsibility][implicit_em.objectives.null_responsibility].
        """
        return null_responsibility(d, self.d0.to(d.dtype), log_prior=log_prior)


# ---------------------------------------------------------------------------------------------
# Unnormalized comparators: no partition function, no competition
# ---------------------------------------------------------------------------------------------


def correntropy(d: Tensor, sigma: float, dim: int = -1, reduction: Reduction = "mean") -> Tensor:
    r"""Correntropy-induced loss $\sum_j \bigl(1 - \exp(-d_j^2/\sigma^2)\bigr)$ (C7).

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    sigma : float
        The kernel width $\sigma > 0$.
    dim : int, default=-1
        The component axis.
    reduction : {"mean", "sum", "none"}, default="mean"
        Reduction over the remaining axes.

    Returns
    -------
    Tensor
        The loss: a scalar, or per sample with `reduction="none"`.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `sigma` <= 0, `dim` is out of range or `reduction` is unknown.

    Notes
    -----
    Gradient: $\partial/\partial d_j = \tfrac{2 d_j}{\sigma^2}\exp(-d_j^2/\sigma^2)$, which
    depends on $d_j$ alone: the Hessian is diagonal, far outliers get a vanishing gradient
    (robustness) and no component competes with another (no responsibility).
    """
    dim = check_component_axis(d, dim)
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return _reduce((1.0 - torch.exp(-(d**2) / sigma**2)).sum(dim=dim), reduction)


class CorrentropyLoss(nn.Module):
    r"""Module form of [correntropy][]: `forward(d)`.

    Parameters
    ----------
    sigma : float, default=1.0
        The kernel width $\sigma > 0$.
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [correntropy][].

    Raises
    ------
    ValueError
        If `sigma` <= 0.
    """

    def __init__(self, sigma: float = 1.0, reduction: Reduction = "mean") -> None:
        super().__init__()
        if not float(sigma) > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.sigma = float(sigma)
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor) -> Tensor:
        return correntropy(d, self.sigma, reduction=self.reduction)


def sigmoid_bce(
    d: Tensor,
    target: Tensor,
    bias: Tensor | float = 0.0,
    dim: int = -1,
    reduction: Reduction = "mean",
) -> Tensor:
    r"""Independent per-component sigmoids with binary cross-entropy (C8).

    Each component $j$ predicts $p_j = \sigma(b - d_j)$ on its own, with loss
    $\sum_j -t_j\log p_j - (1-t_j)\log(1-p_j)$.

    Parameters
    ----------
    d : Tensor
        Distances, component axis at `dim`.
    target : Tensor
        Class indices (one-hot targets) or a float tensor of `d`'s shape in $[0,1]$
        (multi-label or soft).
    bias : Tensor or float, default=0.0
        The shared bias $b$.
    dim : int, default=-1
        The component axis.
    reduction : {"mean", "sum", "none"}, default="mean"
        Reduction over the remaining axes.

    Returns
    -------
    Tensor
        The loss: a scalar, or per sample with `reduction="none"`.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor or `target` holds neither indices nor floats.
    ValueError
        If the target does not fit `d` or lies outside $[0, 1]$, or `reduction` is unknown.

    Notes
    -----
    Gradient: $\partial/\partial d_j = t_j - \sigma(b - d_j)$: component $j$ alone,
    so the Hessian in `d` is diagonal, $\sigma'(b-d_j)$, and there is no responsibility.
    """
    dim = check_component_axis(d, dim)
    if isinstance(target, Tensor) and target.is_floating_point():
        if target.shape != d.shape:
            raise ValueError(
                f"float target must have d's shape {tuple(d.shape)}, got {tuple(target.shape)}"
            )
        if bool(((target < 0) | (target > 1)).any()):
            raise ValueError("float target must lie in [0, 1]")
        t = target.to(d.dtype)
    else:
        t = soft_targets(d, target, dim=dim)
    logits = torch.as_tensor(bias, dtype=d.dtype, device=d.device) - d
    per_component = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, t, reduction="none"
    )
    return _reduce(per_component.sum(dim=dim), reduction)


class SigmoidBCE(nn.Module):
    r"""Module form of [sigmoid_bce][] with a shared bias $b$: `forward(d, target)`.

    Parameters
    ----------
    bias : float, default=0.0
        The initial shared bias $b$.
    learnable_bias : bool, default=False
        Make $b$ a parameter (otherwise a buffer).
    reduction : {"mean", "sum", "none"}, default="mean"
        As in [sigmoid_bce][].
    """

    def __init__(
        self, bias: float = 0.0, learnable_bias: bool = False, reduction: Reduction = "mean"
    ) -> None:
        super().__init__()
        value = torch.tensor(float(bias))
        if learnable_bias:
            self.bias = nn.Parameter(value)
        else:
            self.register_buffer("bias", value)
        self.reduction: Reduction = reduction

    def forward(self, d: Tensor, target: Tensor) -> Tensor:
        return sigmoid_bce(d, target, bias=self.bias.to(d.dtype), reduction=self.reduction)


# ---------------------------------------------------------------------------------------------
# Surrogates of the volume (log-det) term
# ---------------------------------------------------------------------------------------------


def _check_batch(d: Tensor, name: str = "d") -> None:
    check_component_axis(d, -1, name)
    if d.dim() != 2 or d.shape[0] < 2:
        raise ValueError(
            f"{name} must have shape [B, K] with a batch of B >= 2 samples, got {tuple(d.shape)}"
        )


def variance_penalty(d: Tensor, eps: float = 1e-6) -> Tensor:
    r"""Variance penalty $-\sum_j \log(\operatorname{Var}_b(d_{bj}) + \varepsilon)$ over a batch.

    The diagonal of the missing log-det: a component whose distance no longer varies over the
    batch (it answers every input alike, the first sign of collapse, C9) is penalized without
    bound.

    Parameters
    ----------
    d : Tensor
        Distances `[B, K]` with $B \ge 2$.
    eps : float, default=1e-6
        $\varepsilon$.

    Returns
    -------
    Tensor
        The penalty, a scalar.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `d` is not of shape `[B, K]` with $B \ge 2$.

    Notes
    -----
    Gradient: $\partial/\partial d_{bj} = -\dfrac{2(d_{bj}-\bar d_j)}{(B-1)(\operatorname{Var}_j+\varepsilon)}$.
    """
    _check_batch(d)
    return -torch.log(d.var(dim=0) + eps).sum()


def decorrelation_penalty(d: Tensor, eps: float = 1e-6) -> Tensor:
    r"""Decorrelation penalty $\lVert \operatorname{Corr}(d) - I\rVert_F^2$ over a batch.

    The off-diagonal of the missing log-det: components whose distances are correlated answer
    the same inputs (redundant, a softer collapse).

    Parameters
    ----------
    d : Tensor
        Distances `[B, K]` with $B \ge 2$.
    eps : float, default=1e-6
        Added to each variance before the square root.

    Returns
    -------
    Tensor
        The penalty, a scalar.

    Raises
    ------
    TypeError
        If `d` is not a floating tensor.
    ValueError
        If `d` is not of shape `[B, K]` with $B \ge 2$.
    """
    _check_batch(d)
    centered = d - d.mean(dim=0, keepdim=True)
    cov = centered.T @ centered / (d.shape[0] - 1)
    std = torch.sqrt(torch.diagonal(cov) + eps)
    corr = cov / (std[:, None] * std[None, :])
    eye = torch.eye(d.shape[1], dtype=d.dtype, device=d.device)
    return ((corr - eye) ** 2).sum()


class VolumeSurrogate(nn.Module):
    """Both volume surrogates, weighted: `forward(d)` for a batch `d[B, K]`.

    `forward(d)` returns
    `variance_weight * variance_penalty(d) + decorrelation_weight * decorrelation_penalty(d)`
    (see [variance_penalty][] and [decorrelation_penalty][]).

    Parameters
    ----------
    variance_weight : float, default=1.0
        Weight of the variance penalty, >= 0.
    decorrelation_weight : float, default=1.0
        Weight of the decorrelation penalty, >= 0.
    eps : float, default=1e-6
        Passed to both penalties.

    Raises
    ------
    ValueError
        If a weight is negative.
    """

    def __init__(
        self, variance_weight: float = 1.0, decorrelation_weight: float = 1.0, eps: float = 1e-6
    ) -> None:
        super().__init__()
        if variance_weight < 0 or decorrelation_weight < 0:
            raise ValueError("variance_weight and decorrelation_weight must be >= 0")
        self.variance_weight = variance_weight
        self.decorrelation_weight = decorrelation_weight
        self.eps = eps

    def forward(self, d: Tensor) -> Tensor:
        return self.variance_weight * variance_penalty(
            d, self.eps
        ) + self.decorrelation_weight * decorrelation_penalty(d, self.eps)

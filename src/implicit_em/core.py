r"""The functional core: the log-sum-exp over distances and its responsibilities.

For distances (energies) $d_1, \dots, d_K$ the paper's objective is

$$
L(d) = \log \sum_j \exp(-d_j), \qquad
\frac{\partial L}{\partial d_j} = -r_j, \qquad r = \operatorname{softmax}(-d).
$$

Every function here takes an explicit `dim` (the component axis, default `-1`), works for any
batch shape and any floating dtype, and follows the same numerical rules:

- **Extreme magnitudes.** Finite distances up to $|d| = 10^{30}$ give finite values and
  gradients in float32 and float64 (the maximum is subtracted before exponentiating).
- **Half precision.** float16 and bfloat16 inputs are computed in float32 and the result is cast
  back to the input dtype, so the answer is as exact as the output dtype allows.
- **Excluded components.** $d_j = +\infty$ (or a log-prior of $-\infty$) removes
  component $j$: its responsibility is exactly 0 and it receives a zero gradient.
- **All components excluded** (every $d_j = +\infty$ in a row): the sum is empty, so
  [lse][] returns $-\infty$ for that row with a zero gradient, and
  [responsibilities][] returns a row of zeros (no component is responsible). This is the
  same rule PyTorch uses for fully masked attention rows (`_safe_softmax`).
- **NaN** in a row propagates to that row only (its value and its gradient), never elsewhere.
- $d_j = -\infty$ is not a distance; a row containing it yields NaN responsibilities.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "check_component_axis",
    "log_responsibilities",
    "lse",
    "responsibilities",
]

_HALF = (torch.float16, torch.bfloat16)


def check_component_axis(d: Tensor, dim: int, name: str = "d") -> int:
    """Validate that `d` is a floating tensor with a non-empty component axis `dim`.

    Parameters
    ----------
    d : Tensor
        The tensor to check.
    dim : int
        Its component axis (negative values count from the end).
    name : str, default="d"
        The argument's name, used in the error messages.

    Returns
    -------
    int
        `dim` normalized to a non-negative index.

    Raises
    ------
    TypeError
        If `d` is not a tensor or not of a floating dtype.
    ValueError
        If `d` is a scalar, `dim` is out of range or the component axis is empty.
    """
    if not isinstance(d, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(d).__name__}")
    if not d.is_floating_point():
        raise TypeError(
            f"{name} must be a floating tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {d.dtype}"
        )
    if d.dim() == 0:
        raise ValueError(
            f"{name} must have at least one dimension (the component axis), got a scalar"
        )
    if not -d.dim() <= dim < d.dim():
        raise ValueError(f"dim={dim} is out of range for {name} with shape {tuple(d.shape)}")
    dim = dim % d.dim()
    if d.shape[dim] == 0:
        raise ValueError(
            f"{name} has an empty component axis (shape {tuple(d.shape)}, dim={dim}); "
            "at least one component is needed"
        )
    return dim


def _upcast(x: Tensor) -> Tensor:
    return x.float() if x.dtype in _HALF else x


def _logits(d: Tensor, log_prior: Tensor | None, dim: int) -> Tensor:
    """-d + log pi, upcast from half precision, with log_prior validated against d."""
    logits = -_upcast(d)
    if log_prior is None:
        return logits
    if not isinstance(log_prior, Tensor) or not log_prior.is_floating_point():
        raise TypeError("log_prior must be a floating torch.Tensor of log mixing weights")
    try:
        shape = torch.broadcast_shapes(log_prior.shape, d.shape)
    except RuntimeError as err:
        raise ValueError(
            f"log_prior with shape {tuple(log_prior.shape)} does not broadcast against "
            f"d with shape {tuple(d.shape)}"
        ) from err
    if shape != d.shape:
        raise ValueError(
            f"log_prior with shape {tuple(log_prior.shape)} would broadcast d from "
            f"{tuple(d.shape)} to {tuple(shape)}; it must broadcast to d's shape"
        )
    return logits + _upcast(log_prior).to(logits.dtype)


def _excluded_rows(logits: Tensor, dim: int) -> Tensor:
    """Rows (keepdim) in which every logit is -inf: the empty mixture."""
    return logits.amax(dim=dim, keepdim=True) == float("-inf")


def lse(d: Tensor, dim: int = -1, log_prior: Tensor | None = None) -> Tensor:
    r"""The paper's objective $L = \log \sum_j \pi_j \exp(-d_j)$ (to be maximized).

    Parameters
    ----------
    d : Tensor
        Distances of shape `[..., K, ...]` with the component axis at `dim`.
    dim : int, default=-1
        The component axis.
    log_prior : Tensor or None, default=None
        Log mixing weights $\log \pi$, broadcastable to `d`; uniform weights, $\pi_j = 1$,
        when omitted, as in the paper.

    Returns
    -------
    Tensor
        $L$ with the component axis removed, in `d`'s dtype.

    Raises
    ------
    TypeError
        If `d` or `log_prior` is not a floating tensor.
    ValueError
        If `dim` is out of range, the component axis is empty or `log_prior` does not
        broadcast to `d`'s shape.

    Notes
    -----
    The gradient is the negated responsibility,

    $$
    \frac{\partial L}{\partial d_j} = -r_j, \qquad
    r_j = \frac{\pi_j e^{-d_j}}{\sum_k \pi_k e^{-d_k}}, \qquad
    \frac{\partial L}{\partial \log \pi_j} = r_j .
    $$

    Rows whose components are all excluded give $-\infty$ and a zero gradient (see the
    module's numerical rules).

    Examples
    --------
    >>> import torch
    >>> from implicit_em import lse
    >>> lse(torch.tensor([0.0, 0.0]))  # log(1 + 1)
    tensor(0.6931)
    """
    dim = check_component_axis(d, dim)
    logits = _logits(d, log_prior, dim)
    empty = _excluded_rows(logits, dim)
    # Double-where: the excluded rows never reach logsumexp, so their gradient is exactly 0.
    safe = torch.where(empty, torch.zeros_like(logits), logits)
    value = torch.logsumexp(safe, dim=dim)
    value = torch.where(empty.squeeze(dim), torch.full_like(value, float("-inf")), value)
    return value.to(d.dtype)


def log_responsibilities(d: Tensor, log_prior: Tensor | None = None, dim: int = -1) -> Tensor:
    r"""Log-responsibilities $\log r = \log\operatorname{softmax}(-d + \log\pi)$ along `dim`.

    Parameters
    ----------
    d : Tensor
        Distances with the component axis at `dim`.
    log_prior : Tensor or None, default=None
        Log mixing weights $\log \pi$, broadcastable to `d`; uniform when omitted.
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        $\log r$, of `d`'s shape and dtype. Excluded components get $-\infty$; rows with
        every component excluded get $-\infty$ everywhere (their responsibilities are all
        zero) and a zero gradient.

    Raises
    ------
    TypeError
        If `d` or `log_prior` is not a floating tensor.
    ValueError
        If `dim` is out of range, the component axis is empty or `log_prior` does not
        broadcast to `d`'s shape.
    """
    dim = check_component_axis(d, dim)
    logits = _logits(d, log_prior, dim)
    empty = _excluded_rows(logits, dim)
    safe = torch.where(empty, torch.zeros_like(logits), logits)
    log_r = torch.log_softmax(safe, dim=dim)
    log_r = torch.where(empty, torch.full_like(log_r, float("-inf")), log_r)
    return log_r.to(d.dtype)


def responsibilities(d: Tensor, log_prior: Tensor | None = None, dim: int = -1) -> Tensor:
    r"""Posterior responsibilities $r = \operatorname{softmax}(-d + \log\pi)$ along `dim`.

    $r_j = \pi_j e^{-d_j} / \sum_k \pi_k e^{-d_k}$ is the posterior probability of
    component $j$ (the E-step), and $-r = \partial L/\partial d$ for [lse][].

    Parameters
    ----------
    d : Tensor
        Distances with the component axis at `dim`.
    log_prior : Tensor or None, default=None
        Log mixing weights $\log \pi$, broadcastable to `d`; uniform when omitted.
    dim : int, default=-1
        The component axis.

    Returns
    -------
    Tensor
        $r$, of `d`'s shape and dtype, whose entries along `dim` sum to 1, except in rows
        whose components are all excluded, which are all zeros (see the module's numerical
        rules).

    Raises
    ------
    TypeError
        If `d` or `log_prior` is not a floating tensor.
    ValueError
        If `dim` is out of range, the component axis is empty or `log_prior` does not
        broadcast to `d`'s shape.

    Notes
    -----
    The Jacobian is $\partial r_i / \partial d_j = -(r_i\delta_{ij} - r_i r_j)$.

    Examples
    --------
    >>> import torch
    >>> from implicit_em import responsibilities
    >>> responsibilities(torch.tensor([0.0, 1.0, float("inf")]))
    tensor([0.7311, 0.2689, 0.0000])
    """
    dim = check_component_axis(d, dim)
    logits = _logits(d, log_prior, dim)
    empty = _excluded_rows(logits, dim)
    safe = torch.where(empty, torch.zeros_like(logits), logits)
    r = torch.softmax(safe, dim=dim)
    r = torch.where(empty, torch.zeros_like(r), r)
    return r.to(d.dtype)

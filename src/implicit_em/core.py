r"""The functional core: the log-sum-exp over distances and its responsibilities.

For distances (energies) :math:`d_1, \dots, d_K` the paper's objective is

.. math::  L(d) = \log \sum_j \exp(-d_j), \qquad
           \frac{\partial L}{\partial d_j} = -r_j, \qquad r = \operatorname{softmax}(-d).

Every function here takes an explicit ``dim`` (the component axis, default ``-1``), works for any
batch shape and any floating dtype, and follows the same numerical rules:

* **Extreme magnitudes.** Finite distances up to :math:`|d| = 10^{30}` give finite values and
  gradients in float32 and float64 (the maximum is subtracted before exponentiating).
* **Half precision.** float16 and bfloat16 inputs are computed in float32 and the result is cast
  back to the input dtype, so the answer is as exact as the output dtype allows.
* **Excluded components.** :math:`d_j = +\infty` (or a log-prior of :math:`-\infty`) removes
  component :math:`j`: its responsibility is exactly 0 and it receives a zero gradient.
* **All components excluded** (every :math:`d_j = +\infty` in a row): the sum is empty, so
  :func:`lse` returns :math:`-\infty` for that row with a zero gradient, and
  :func:`responsibilities` returns a row of zeros (no component is responsible). This is the
  same rule PyTorch uses for fully masked attention rows (``_safe_softmax``).
* **NaN** in a row propagates to that row only (its value and its gradient), never elsewhere.
* :math:`d_j = -\infty` is not a distance; a row containing it yields NaN responsibilities.
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
    """Validate that ``d`` is a floating tensor with a non-empty component axis ``dim``.

    Returns ``dim`` normalized to a non-negative index. Raises ``TypeError`` for non-tensors and
    non-floating dtypes, ``ValueError`` for scalars, an out-of-range ``dim`` or an empty axis.
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
    r"""The paper's objective :math:`L = \log \sum_j \pi_j \exp(-d_j)` (to be maximized).

    Args:
        d: distances of shape ``[..., K, ...]`` with the component axis at ``dim``.
        dim: the component axis.
        log_prior: optional log mixing weights :math:`\log \pi`, broadcastable to ``d``
            (uniform weights, :math:`\pi_j = 1`, when omitted, as in the paper).

    Returns:
        ``L`` with the component axis removed, in ``d``'s dtype.

    Gradient: :math:`\partial L / \partial d_j = -r_j` with
    :math:`r_j = \pi_j e^{-d_j} / \sum_k \pi_k e^{-d_k}`, and
    :math:`\partial L / \partial \log \pi_j = r_j`. Rows whose components are all excluded
    give :math:`-\infty` and a zero gradient (see the module docstring).
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
    r""":math:`\log r = \log\operatorname{softmax}(-d + \log\pi)` along ``dim``.

    Excluded components get :math:`-\infty`; rows with every component excluded get
    :math:`-\infty` everywhere (their responsibilities are all zero) and a zero gradient.
    """
    dim = check_component_axis(d, dim)
    logits = _logits(d, log_prior, dim)
    empty = _excluded_rows(logits, dim)
    safe = torch.where(empty, torch.zeros_like(logits), logits)
    log_r = torch.log_softmax(safe, dim=dim)
    log_r = torch.where(empty, torch.full_like(log_r, float("-inf")), log_r)
    return log_r.to(d.dtype)


def responsibilities(d: Tensor, log_prior: Tensor | None = None, dim: int = -1) -> Tensor:
    r"""Posterior responsibilities :math:`r = \operatorname{softmax}(-d + \log\pi)` along ``dim``.

    :math:`r_j = \pi_j e^{-d_j} / \sum_k \pi_k e^{-d_k}` is the posterior probability of
    component :math:`j` (the E-step), and :math:`-r = \partial L/\partial d` for :func:`lse`.
    Its Jacobian is :math:`\partial r_i / \partial d_j = -(r_i\delta_{ij} - r_i r_j)`.

    Returns a tensor of ``d``'s shape and dtype whose entries along ``dim`` sum to 1, except in
    rows whose components are all excluded, which are all zeros (see the module docstring).
    """
    dim = check_component_axis(d, dim)
    logits = _logits(d, log_prior, dim)
    empty = _excluded_rows(logits, dim)
    safe = torch.where(empty, torch.zeros_like(logits), logits)
    r = torch.softmax(safe, dim=dim)
    r = torch.where(empty, torch.zeros_like(r), r)
    return r.to(d.dtype)

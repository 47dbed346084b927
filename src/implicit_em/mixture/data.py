"""Input handling: validation of arrays and tensors, chunking, and iterables of batches.

A `GaussianMixture` accepts NumPy arrays (and anything `sklearn.utils.check_array`
accepts), torch tensors (kept on their device; results come back as tensors) and, for `fit`,
re-iterable collections of batches such as a `torch.utils.data.DataLoader` (a batch may
be a tensor, an array, or a tuple/list whose first item is the data).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import scipy.sparse
import torch
from torch import Tensor

__all__ = [
    "as_batches",
    "check_rows",
    "check_tensor",
    "first_batch",
    "is_batch_iterable",
    "iterate_batches",
    "to_output",
]


def is_batch_iterable(x: Any) -> bool:
    """True for a collection of batches (not an array, tensor, list of rows or string)."""
    if isinstance(x, (np.ndarray, Tensor, str, bytes, list, tuple)) or hasattr(x, "__array__"):
        return False
    if scipy.sparse.issparse(x):
        return False
    return isinstance(x, Iterable)


def check_tensor(x: Tensor, n_features: int | None, name: str) -> Tensor:
    """Validate a 2-D finite real tensor with `n_features` columns (if given)."""
    if x.is_complex():
        raise ValueError("Complex data not supported")
    if x.dim() != 2:
        raise ValueError(
            f"Expected 2D array, got {x.dim()}D tensor instead: reshape your data to "
            "(n_samples, n_features)"
        )
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(
            f"Found array with shape {tuple(x.shape)}; at least 1 row and column needed"
        )
    if n_features is not None and x.shape[1] != n_features:
        raise ValueError(
            f"X has {x.shape[1]} features, but {name} is expecting {n_features} features as input."
        )
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError("Input X contains NaN or infinity.")
    return x


def check_rows(n_samples: int, n_components: int) -> None:
    """`ValueError` when there are fewer samples than components."""
    if n_samples < n_components:
        raise ValueError(
            f"Expected n_samples >= n_components but got n_components = {n_components}, "
            f"n_samples = {n_samples}"
        )


def _to_tensor(x: Any, dtype: torch.dtype, device: torch.device) -> Tensor:
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        x = np.array(x)
    return torch.as_tensor(x).to(device=device, dtype=dtype)


def as_batches(
    x: Any, batch_size: int | None, dtype: torch.dtype, device: torch.device
) -> Iterator[Tensor]:
    """Chunks of `batch_size` rows (all rows if None) as `dtype` tensors on `device`."""
    n = x.shape[0]
    step = n if batch_size is None else batch_size
    for start in range(0, n, step):
        yield _to_tensor(x[start : start + step], dtype, device)


def _floating(x: Any) -> Tensor:
    """`x` as a tensor: float32 stays float32, anything else becomes float64."""
    if not isinstance(x, Tensor):
        array = np.asarray(x)
        x = torch.as_tensor(array if array.dtype == np.float32 else array.astype(np.float64))
    return x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float64)


def iterate_batches(
    batches: Iterable[Any],
    n_features: int | None,
    name: str,
    dtype: torch.dtype | None,
    device: torch.device,
) -> Iterator[Tensor]:
    """Validated tensors from an iterable of batches (tensor, array or `(x, ...)`), as
    `dtype` (None: float32 stays float32, anything else becomes float64)."""
    for batch in batches:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        x = check_tensor(_floating(x), n_features, name)
        yield x.to(device=device, dtype=x.dtype if dtype is None else dtype)


def first_batch(batches: Iterable[Any], name: str) -> Tensor:
    """The first batch of a re-iterable collection, validated, on the CPU in its own dtype
    (`ValueError` for a one-shot iterator or an empty collection)."""
    if iter(batches) is batches:
        raise ValueError(
            "fit needs a re-iterable collection of batches (e.g. a DataLoader), "
            "not a one-shot iterator"
        )
    first = next(iterate_batches(batches, None, name, None, torch.device("cpu")), None)
    if first is None:
        raise ValueError("fit received an empty collection of batches")
    return first


def to_output(values: Tensor, like: Any) -> Any:
    """`values` as a tensor on `like`'s device when `like` is a tensor, else as NumPy."""
    if isinstance(like, Tensor):
        return values.to(like.device)
    return values.detach().cpu().numpy()

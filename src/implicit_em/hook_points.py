r"""Hook points: where this package's objectives announce a site to the tracer.

`hook_point` is a no-op call. While a `Tracer` captures a
measured step, its `TorchFunctionMode` sees the call (PyTorch's public override protocol,
`torch.overrides.handle_torch_function`) and reads the site from the announced tensors;
otherwise the call costs one check. The objectives announce their *per-sample* loss
$\ell_i$ (before the batch reduction), so the gradient that reaches it is the row factor
$c_i = \partial L/\partial\ell_i$ whatever the reduction and whatever the caller does
with the loss afterwards.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.overrides import handle_torch_function, has_torch_function

__all__ = ["hook_point"]


def hook_point(name: str, loss: Tensor, **announced: Any) -> None:
    """Announce site `name` (`"mixture_nll"`, `"cross_entropy"`) with its per-sample
    `loss` and the tensors it was computed from (`d`, `target`, `log_prior`, `dim`,
    ...). Returns nothing and changes nothing."""
    if has_torch_function((loss,)):
        handle_torch_function(hook_point, (loss,), name, loss, **announced)

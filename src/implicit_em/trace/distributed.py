"""Distributed tracing: every rank traces its shard; statistics are all-reduced, rank 0 writes.

Statistics are sums (`n`, `mass`, `entropy`, ...) and maxima (keys ending in `_max`),
so the reduced statistics are those of the global batch: one `SUM` and one `MAX`
`all_reduce` per measurement, over every site at once.

Each reduction returns only once the backend has let go of the tensors it was given. A gloo
worker thread drops its reference to a finished collective shortly *after* the collective
returns, and dropping the last C++ reference to a tensor created in Python takes the GIL. If
that happened while the interpreter finalizes (a tracer's last reduction just before the
process exits), the worker thread would be killed inside a destructor and the process would
abort ("terminate called without an active exception"). Waiting for the release here, with the
GIL free, keeps every collective of the tracer closed before the caller moves on.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

from implicit_em.trace.metrics import Stats

__all__ = ["is_distributed", "rank", "reduce_stats"]


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def _collective_device() -> torch.device:
    """Where collectives run: the current CUDA device under NCCL (CPU tensors are refused
    there), else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _flatten(stats: list[Stats], is_max: bool) -> torch.Tensor:
    parts = [
        v.reshape(-1).double().cpu()
        for s in stats
        for key, v in sorted(s.items())
        if key.endswith("_max") == is_max
    ]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _unflatten(stats: list[Stats], flat: torch.Tensor, is_max: bool) -> None:
    offset = 0
    for s in stats:
        for key, v in sorted(s.items()):
            if key.endswith("_max") != is_max:
                continue
            n = v.numel()
            s[key] = flat[offset : offset + n].reshape(v.shape)
            offset += n


def _all_reduce(t: torch.Tensor, op: dist.ReduceOp, timeout: float = 5.0) -> None:
    """`all_reduce` of `t` in place, returning once the backend has dropped `t`.

    The backend holds a reference to `t` while it works on it (visible as one extra Python
    reference); the wait sleeps (GIL released) until that reference is gone, at most
    `timeout` seconds.
    """
    alone = sys.getrefcount(t)
    dist.all_reduce(t, op=op)
    if dist.get_backend() != "gloo":
        return  # NCCL holds its references until the GPU work completes: no teardown race.
    deadline = time.monotonic() + timeout
    while sys.getrefcount(t) > alone and time.monotonic() < deadline:
        time.sleep(1e-4)


def _on_cpu(stats: list[Stats]) -> list[Stats]:
    """The statistics in float64 on the CPU, with one transfer per other device (a transfer
    from a GPU waits for its queued work: one wait per flush instead of one per statistic);
    statistics already on the CPU are only converted."""
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for s in stats:
        for v in s.values():
            if v.device.type != "cpu":
                by_device.setdefault(v.device, []).append(v.reshape(-1).double())
    flat = {d: torch.cat(parts).cpu() for d, parts in by_device.items()}
    offsets = dict.fromkeys(flat, 0)
    out = []
    for s in stats:
        moved = {}
        for k, v in s.items():
            if v.device.type == "cpu":
                moved[k] = v.double()
                continue
            n, i = v.numel(), offsets[v.device]
            moved[k] = flat[v.device][i : i + n].reshape(v.shape)
            offsets[v.device] = i + n
        out.append(moved)
    return out


def reduce_stats(stats: list[Stats]) -> list[Stats]:
    """All-reduce the statistics of every site (returned in float64 on the CPU); a no-op on one
    process.

    Every rank must have captured the same sites with the same shapes (as under DDP); a
    mismatch raises `RuntimeError` instead of silently mixing sites.
    """
    stats = _on_cpu(stats)
    if not is_distributed():
        return stats
    device = _collective_device()
    sums, maxima = _flatten(stats, False).to(device), _flatten(stats, True).to(device)
    shape = torch.tensor(
        [sums.numel(), maxima.numel(), -sums.numel(), -maxima.numel()],
        dtype=torch.float64,
        device=device,
    )
    _all_reduce(shape, dist.ReduceOp.MAX)
    if shape[0] != -shape[2] or shape[1] != -shape[3]:
        raise RuntimeError(
            "ranks captured different sites in this measurement; the tracer needs the same "
            "sites on every rank (as under DistributedDataParallel)"
        )
    _all_reduce(sums, dist.ReduceOp.SUM)
    _all_reduce(maxima, dist.ReduceOp.MAX)
    _unflatten(stats, sums.cpu(), False)
    _unflatten(stats, maxima.cpu(), True)
    return stats

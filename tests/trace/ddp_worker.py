"""A 2-process DDP run for the tracer test (launched by torchrun; gloo backend)."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from implicit_em.trace import Tracer


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(6, 4))
    x_all, y_all = torch.randn(16, 6), torch.randint(0, 4, (16,))
    x, y = x_all[rank * 8 : (rank + 1) * 8], y_all[rank * 8 : (rank + 1) * 8]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model, sinks=["memory", f"jsonl:{out}/rank{rank}.jsonl"]) as tracer:
        for _ in range(2):
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
    with open(f"{out}/history{rank}.json", "w") as f:
        json.dump(tracer.history.records, f)
    if rank == 0:
        torch.save({"state": model.module.state_dict(), "x": x_all, "y": y_all}, f"{out}/final.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

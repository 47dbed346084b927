"""A Gaussian mixture fitted by several processes, each on its own shard of the data.

Run with two CPU processes (gloo):

    torchrun --standalone --nproc_per_node=2 examples/distributed_fit.py

Each rank fits its shard; the fit is that of the shards concatenated in rank order, so it equals
one process's fit on all the data. Rank 0 checks that, with `distributed=False` (a local fit
inside the process group), and prints the largest difference.
"""

from __future__ import annotations

import numpy as np
import torch.distributed as dist
from sklearn.datasets import make_blobs

from implicit_em.mixture import GaussianMixture


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x, _ = make_blobs(n_samples=4000, n_features=3, centers=4, random_state=0)
    shard = np.array_split(x, world)[rank]

    gm = GaussianMixture(4, covariance_type="full", random_state=0).fit(shard)

    if rank == 0:
        single = GaussianMixture(4, covariance_type="full", random_state=0, distributed=False)
        single.fit(x)
        gap = max(
            abs(gm.lower_bound_ - single.lower_bound_),
            float(np.abs(gm.means_ - single.means_).max()),
            float(np.abs(gm.covariances_ - single.covariances_).max()),
        )
        print(f"{world} processes: {gm.n_iter_} passes, mean log-likelihood {gm.lower_bound_:.6f}")
        print(
            f"1 process:   {single.n_iter_} passes, mean log-likelihood {single.lower_bound_:.6f}"
        )
        print(f"largest difference: {gap:.1e}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Helper launched by ``torchrun`` in test_distributed.py: fit on this rank's shard, save."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import torch.distributed as dist
from sklearn.exceptions import ConvergenceWarning

from implicit_em.mixture import GaussianMixture


def main(data_path: str, out_path: str, fitter: str, covariance_type: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = np.load(data_path)
    shard = np.array_split(data["x"], world)[rank]
    gm = GaussianMixture(
        4,
        covariance_type=covariance_type,
        fitter=fitter,
        max_iter=10,
        tol=0.0,
        batch_size=64,
        weights_init=data["weights"],
        means_init=data["means"],
        precisions_init=data["precisions"],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.fit(shard)
    assert gm.is_distributed()
    if rank == 0:
        np.savez(
            out_path,
            means=gm.means_,
            covariances=gm.covariances_,
            weights=gm.weights_,
            lower_bound=gm.lower_bound_,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:5])

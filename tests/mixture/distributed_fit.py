"""Helper launched by ``torchrun`` in test_distributed.py: every case fitted on this rank's
shard (rank 0 takes the first ``split`` rows, rank 1 the rest), the results saved by rank 0."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import torch.distributed as dist
from sklearn.exceptions import ConvergenceWarning
from torch.utils.data import DataLoader

from implicit_em.mixture import GaussianMixture
from implicit_em.mixture.distributed import collectives
from implicit_em.mixture.initialization import initial_sample

COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
FITTERS = ("em", "adam")
INITS = ("k-means++", "random_from_data", "random")


def fitted(gm: GaussianMixture) -> dict[str, np.ndarray]:
    return {
        "means": gm.means_,
        "covariances": gm.covariances_,
        "weights": gm.weights_,
        "lower_bound": np.array(gm.lower_bound_),
        "n_iter": np.array(gm.n_iter_),
    }


def main(data_path: str, out_path: str, split: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = np.load(data_path)["x"]
    shard = x[: int(split)] if rank == 0 else x[int(split) :]
    results: dict[str, np.ndarray] = {}

    def keep(case: str, gm: GaussianMixture) -> None:
        assert gm.is_distributed()
        results.update({f"{case}/{k}": v for k, v in fitted(gm).items()})

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for covariance_type in COVARIANCE_TYPES:
            for fitter in FITTERS:
                gm = GaussianMixture(
                    4, covariance_type=covariance_type, fitter=fitter, random_state=0
                )
                keep(f"{covariance_type}-{fitter}", gm.fit(shard))
        for init in INITS:
            gm = GaussianMixture(4, init_params=init, random_state=0)
            keep(f"init-{init}", gm.fit(shard))
        batches = DataLoader(shard, batch_size=64)
        keep("batches", GaussianMixture(4, random_state=0, max_iter=5).fit(batches))
        gm = GaussianMixture(4, random_state=0)
        for _ in range(5):
            gm.partial_fit(shard)
        keep("partial", gm)
        with collectives(True):
            results["sample"] = initial_sample(shard, np.random.RandomState(0), limit=100)
        if rank == 0:
            # A local fit inside the group: rank 1 runs no collective meanwhile.
            local = GaussianMixture(4, random_state=0, distributed=False).fit(x)
            assert not local.is_distributed()
            results.update({f"local/{k}": v for k, v in fitted(local).items()})
            np.savez(out_path, **results)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])

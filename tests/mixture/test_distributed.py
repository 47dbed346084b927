"""Two gloo processes under torchrun equal the single-process fit on the concatenated data,
with the default (data-driven) initializations."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from torch.utils.data import DataLoader

from implicit_em.mixture import GaussianMixture
from implicit_em.mixture.initialization import initial_sample

HELPER = Path(__file__).with_name("distributed_fit.py")
EXAMPLE = Path(__file__).parents[2] / "examples" / "distributed_fit.py"
SPLIT = 250
COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
FITTERS = ("em", "adam")
INITS = ("k-means++", "random_from_data", "random")


class Batches:
    """A re-iterable collection of batches."""

    def __init__(self, batches: list) -> None:
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)


def single(x: np.ndarray, **params: object) -> GaussianMixture:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianMixture(4, random_state=0, **params).fit(x)


def assert_same_fit(got: dict, case: str, gm: GaussianMixture) -> None:
    assert int(got[f"{case}/n_iter"]) == gm.n_iter_, case
    assert float(got[f"{case}/lower_bound"]) == pytest.approx(gm.lower_bound_, abs=1e-10), case
    for name in ("means", "covariances", "weights"):
        expected = getattr(gm, f"{name}_")
        np.testing.assert_allclose(
            got[f"{case}/{name}"], expected, atol=1e-10, rtol=0, err_msg=case
        )


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory, blobs, torchrun) -> dict:
    tmp = tmp_path_factory.mktemp("distributed")
    np.savez(tmp / "data.npz", x=blobs)
    out = tmp / "out.npz"
    proc = torchrun(HELPER, tmp / "data.npz", out, SPLIT, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out))


@pytest.mark.slow
@pytest.mark.parametrize("fitter", FITTERS)
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_default_fit_equals_single_process(two_process_results, blobs, covariance_type, fitter):
    gm = single(blobs, covariance_type=covariance_type, fitter=fitter)
    assert_same_fit(two_process_results, f"{covariance_type}-{fitter}", gm)


@pytest.mark.slow
@pytest.mark.parametrize("init", INITS)
def test_every_initialization_equals_single_process(two_process_results, blobs, init):
    assert_same_fit(two_process_results, f"init-{init}", single(blobs, init_params=init))


@pytest.mark.slow
def test_batches_start_from_the_first_batch_of_rank_0(two_process_results, blobs):
    # The concatenated data's batches: rank 0's, then rank 1's.
    batches = [*DataLoader(blobs[:SPLIT], batch_size=64), *DataLoader(blobs[SPLIT:], batch_size=64)]
    assert_same_fit(two_process_results, "batches", single(Batches(batches), max_iter=5))


@pytest.mark.slow
def test_partial_fit_equals_single_process(two_process_results, blobs):
    gm = GaussianMixture(4, random_state=0)
    for _ in range(5):
        gm.partial_fit(blobs)
    assert_same_fit(two_process_results, "partial", gm)


@pytest.mark.slow
def test_subsampled_start_draws_from_the_concatenated_rows(two_process_results, blobs):
    expected = initial_sample(blobs, np.random.RandomState(0), limit=100)
    np.testing.assert_array_equal(two_process_results["sample"], expected)


@pytest.mark.slow
def test_local_fit_inside_a_process_group(two_process_results, blobs):
    assert_same_fit(two_process_results, "local", single(blobs))


def test_distributed_true_needs_a_process_group(blobs):
    with pytest.raises(ValueError, match="distributed=True needs an initialized"):
        GaussianMixture(2, distributed=True).fit(blobs)


def test_without_a_process_group_auto_is_local(blobs):
    gm = GaussianMixture(2, random_state=0, max_iter=3).fit(blobs)
    assert not gm.is_distributed()


@pytest.mark.slow
def test_the_example_runs_under_torchrun(torchrun):
    proc = torchrun(EXAMPLE, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    gap = re.search(r"largest difference: (\S+)", proc.stdout)
    assert gap is not None, proc.stdout
    assert float(gap.group(1)) <= 1e-10

"""Two gloo processes under torchrun equal the single-process fit on the concatenated data."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from implicit_em.mixture import GaussianMixture

HELPER = Path(__file__).with_name("distributed_fit.py")


@pytest.mark.slow
@pytest.mark.parametrize(("fitter", "covariance_type"), [("em", "full"), ("adam", "diag")])
def test_torchrun_two_processes_equal_single_process(
    tmp_path, blobs, fitter, covariance_type, torchrun
):
    rows = np.random.default_rng(0).choice(len(blobs), 4, replace=False)
    start = GaussianMixture(4, covariance_type=covariance_type, max_iter=0).fit(blobs)
    data = tmp_path / "data.npz"
    np.savez(
        data, x=blobs, weights=np.full(4, 0.25), means=blobs[rows], precisions=start.precisions_
    )
    out = tmp_path / "out.npz"
    proc = torchrun(HELPER, data, out, fitter, covariance_type, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(out)
    single = GaussianMixture(
        4,
        covariance_type=covariance_type,
        fitter=fitter,
        max_iter=10,
        tol=0.0,
        weights_init=np.full(4, 0.25),
        means_init=blobs[rows],
        precisions_init=start.precisions_,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        single.fit(blobs)
    assert float(got["lower_bound"]) == pytest.approx(single.lower_bound_, abs=1e-10)
    np.testing.assert_allclose(got["means"], single.means_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(got["covariances"], single.covariances_, atol=1e-10, rtol=0)
    np.testing.assert_allclose(got["weights"], single.weights_, atol=1e-10, rtol=0)

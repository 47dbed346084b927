"""scikit-learn's own GaussianMixture tests, run against ``implicit_em``'s estimator.

The installed ``sklearn/mixture/tests/test_gaussian_mixture.py`` and ``test_mixture.py`` run in a
subprocess with our class substituted (:mod:`sklearn_substitution`), once in float64 and once with
``SKLEARN_RUN_FLOAT32_TESTS=1``. The only exclusions are tests that call scikit-learn's private
API on the estimator object (:data:`EXCLUDED`); each has a public-API test of the same property
below.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from implicit_em.mixture import GaussianMixture

COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")

# test name -> (the private it reaches for on the object, why, the public-API test here)
EXCLUDED = {
    "test_gaussian_mixture_n_parameters": (
        "_n_parameters",
        "asserts GaussianMixture._n_parameters(), a private method",
        "test_free_parameter_count_read_off_bic_minus_aic",
    ),
    "test_gaussian_mixture_aic_bic": (
        "_n_parameters",
        "builds the expected AIC/BIC from GaussianMixture._n_parameters()",
        "test_aic_bic_near_the_gaussian_entropy_bound",
    ),
    "test_gaussian_mixture_precisions_init": (
        "_initialize",
        "calls GaussianMixture._set_parameters and GaussianMixture._initialize(X, resp)",
        "test_precisions_init_sets_the_starting_cholesky_factor",
    ),
    "test_gaussian_mixture_all_init_does_not_estimate_gaussian_parameters": (
        "_estimate_gaussian_parameters",
        "mocks sklearn.mixture._gaussian_mixture._estimate_gaussian_parameters, which only "
        "scikit-learn's class calls",
        "test_full_user_start_is_not_estimated_from_the_data",
    ),
}
MODULES = ("test_gaussian_mixture", "test_mixture")


def _tests_dir() -> Path:
    spec = importlib.util.find_spec("sklearn.mixture")
    tests = Path(spec.origin).parent / "tests"
    if not all((tests / f"{m}.py").is_file() for m in MODULES):
        pytest.skip(f"the installed scikit-learn has no mixture tests in {tests}")
    return tests


def test_exclusions_still_reach_for_privates():
    """Every exclusion names an existing test whose source still uses the named private."""
    _tests_dir()
    module = importlib.import_module("sklearn.mixture.tests.test_gaussian_mixture")
    for name, (private, _, public) in EXCLUDED.items():
        assert private in inspect.getsource(getattr(module, name)), name
        assert callable(globals()[public]), public


def _run_suite(tmp_path: Path, float32: bool) -> dict[str, int | list[str]]:
    tests = _tests_dir()
    report = tmp_path / "report.xml"
    here = Path(__file__).parent
    src = Path(importlib.util.find_spec("implicit_em").origin).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(src)])}
    env.pop("SKLEARN_RUN_FLOAT32_TESTS", None)
    env["OMP_NUM_THREADS"] = "1"  # small problems: threads only contend on shared cores
    if float32:
        env["SKLEARN_RUN_FLOAT32_TESTS"] = "1"
    env["IMPLICIT_EM_EXCLUDED_TESTS"] = ",".join(EXCLUDED)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "sklearn_substitution",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={report}",
        *(str(tests / f"{m}.py") for m in MODULES),
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    if not report.exists():
        pytest.fail(
            f"scikit-learn's suite did not run:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    suite = ET.parse(report).getroot().find("testsuite")
    failed = [
        f"{case.get('name')}: {problem.get('message', '')}"
        for case in suite.iter("testcase")
        for problem in (*case.findall("failure"), *case.findall("error"))
    ]
    counts = {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
    return {**counts, "failed": failed, "output": done.stdout[-3000:]}


@pytest.mark.parametrize("float32", [False, True], ids=["float64", "float32"])
def test_sklearn_gaussian_mixture_suite_passes(tmp_path, float32):
    result = _run_suite(tmp_path, float32)
    passed = result["tests"] - result["failures"] - result["errors"] - result["skipped"]
    print(
        f"scikit-learn suite ({'float32 on' if float32 else 'float64'}): {passed} passed, "
        f"{result['failures'] + result['errors']} failed, {result['skipped']} skipped, "
        f"{len(EXCLUDED)} tests excluded"
    )
    assert not result["failed"], "\n".join(result["failed"]) + "\n" + result["output"]
    assert passed >= 40


# ---------------------------------------------------------------------------------------------
# Public-API equivalents of the excluded tests
# ---------------------------------------------------------------------------------------------


def test_free_parameter_count_read_off_bic_minus_aic():
    """BIC - AIC = p (log N - 2): the free-parameter count scikit-learn's test expects."""
    rng = np.random.RandomState(0)
    n_samples, n_features, n_components = 50, 5, 2
    x = rng.randn(n_samples, n_features)
    n_params = {"spherical": 13, "diag": 21, "tied": 26, "full": 41}
    for covariance_type in COVARIANCE_TYPES:
        gm = GaussianMixture(n_components, covariance_type=covariance_type, random_state=0)
        gm.fit(x)
        p = (gm.bic(x) - gm.aic(x)) / (np.log(n_samples) - 2)
        assert p == pytest.approx(n_params[covariance_type], abs=1e-8), covariance_type


def test_aic_bic_near_the_gaussian_entropy_bound():
    """AIC and BIC are within N·D/√N of the standard-normal entropy's, with p counted by hand."""
    rng = np.random.RandomState(0)
    n_samples, n, d = 50, 2, 3
    x = rng.randn(n_samples, d)
    sgh = 0.5 * (np.linalg.slogdet(np.cov(x.T, bias=True))[1] + d * (1 + np.log(2 * np.pi)))
    covariance = {"full": n * d * (d + 1) // 2, "tied": d * (d + 1) // 2, "diag": n * d}
    covariance["spherical"] = n
    bound = d / np.sqrt(n_samples)
    for covariance_type in COVARIANCE_TYPES:
        p = covariance[covariance_type] + n * d + n - 1
        gm = GaussianMixture(n, covariance_type=covariance_type, random_state=0, max_iter=200)
        gm.fit(x)
        assert (gm.aic(x) - (2 * n_samples * sgh + 2 * p)) / n_samples < bound
        assert (gm.bic(x) - (2 * n_samples * sgh + np.log(n_samples) * p)) / n_samples < bound


def _precision_cholesky(precisions: np.ndarray, covariance_type: str) -> np.ndarray:
    """:math:`U` (upper) with :math:`UU^\\top = \\Sigma^{-1}`, from the covariance, by hand."""
    if covariance_type in ("diag", "spherical"):
        return np.sqrt(precisions)
    covariances = np.linalg.inv(precisions)
    lower = np.linalg.cholesky(covariances)
    eye = np.broadcast_to(np.eye(covariances.shape[-1]), covariances.shape)
    return np.swapaxes(np.linalg.solve(lower, eye), -1, -2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_precisions_init_sets_the_starting_cholesky_factor(covariance_type, dtype):
    """``precisions_init`` alone fixes the start's precision factor (scikit-learn #26415)."""
    rs = np.random.RandomState(42)
    x = rs.random_sample((100, 3)).astype(dtype)
    resp = rs.random_sample((100, 4))
    resp /= resp.sum(axis=1, keepdims=True)
    n = resp.sum(axis=0)
    means = resp.T @ x / n[:, None]
    diff = x[None] - means[:, None]
    full = np.einsum("kn,kni,knj->kij", resp.T, diff, diff) / n[:, None, None] + 1e-6 * np.eye(3)
    precisions = {
        "full": np.linalg.inv(full),
        "tied": np.linalg.inv((full * n[:, None, None]).sum(axis=0) / n.sum()),
        "diag": 1 / np.einsum("kii->ki", full),
        "spherical": 1 / np.einsum("kii->ki", full).mean(axis=1),
    }[covariance_type].astype(dtype)
    gm = GaussianMixture(4, covariance_type=covariance_type, precisions_init=precisions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gm.set_params(max_iter=0, random_state=0).fit(x)
    assert gm.precisions_cholesky_.dtype == dtype
    rtol = 1e-4 if dtype == np.float32 else 1e-7
    np.testing.assert_allclose(
        gm.precisions_cholesky_,
        _precision_cholesky(precisions.astype(np.float64), covariance_type),
        rtol=rtol,
    )


@pytest.mark.parametrize("init_params", ["kmeans", "k-means++", "random", "random_from_data"])
def test_full_user_start_is_not_estimated_from_the_data(init_params):
    """With weights, means and precisions all given, the start is exactly them, whatever the
    data, ``init_params`` or ``random_state`` (scikit-learn gh-26015), and every pass takes one
    M-step (``lower_bounds_`` has ``n_iter_`` entries)."""
    rng = np.random.RandomState(0)
    weights = np.array([0.3, 0.7])
    means = rng.rand(2, 2) * 50
    precisions = np.array([np.linalg.inv(np.cov(rng.randn(2, 20))) for _ in range(2)])
    start = {"weights_init": weights, "means_init": means, "precisions_init": precisions}
    x = rng.randn(200, 2) * 3 + 25
    for data, seed in ((x, 0), (-x * 100, 7)):
        gm = GaussianMixture(2, init_params=init_params, random_state=seed, max_iter=0, **start)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gm.fit(data)
        np.testing.assert_array_equal(gm.weights_, weights)
        np.testing.assert_array_equal(gm.means_, means)
        np.testing.assert_allclose(gm.precisions_, precisions, rtol=1e-12)
    gm = GaussianMixture(2, init_params=init_params, random_state=0, **start).fit(x)
    assert len(gm.lower_bounds_) == gm.n_iter_ >= 1

"""A pytest plugin (``-p sklearn_substitution``) that puts ``implicit_em``'s GaussianMixture in
place of scikit-learn's before scikit-learn's own mixture tests are imported.

Those tests do ``from sklearn.mixture import GaussianMixture`` (and parametrize over instances
at import time), so replacing the package attribute at plugin load is enough; collection then
checks that every collected module holds our class. The test functions named (comma-separated)
in the environment variable ``IMPLICIT_EM_EXCLUDED_TESTS`` are deselected, every
parametrization of each; a name that matches nothing is an error.
"""

from __future__ import annotations

import os
import sys

import pytest
import sklearn.mixture

from implicit_em.mixture import GaussianMixture

sklearn.mixture.GaussianMixture = GaussianMixture


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = sys.modules[item.module.__name__]
        if getattr(module, "GaussianMixture", GaussianMixture) is not GaussianMixture:
            raise pytest.UsageError(f"{module.__name__} still holds scikit-learn's GaussianMixture")
    names = {n for n in os.environ.get("IMPLICIT_EM_EXCLUDED_TESTS", "").split(",") if n}
    excluded = [item for item in items if item.originalname in names]
    missing = names - {item.originalname for item in excluded}
    if missing:
        raise pytest.UsageError(f"excluded tests not found: {sorted(missing)}")
    if excluded:
        config.hook.pytest_deselected(items=excluded)
        items[:] = [item for item in items if item.originalname not in names]

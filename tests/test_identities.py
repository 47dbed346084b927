"""The identity registry and the `implicit-em verify` command."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import implicit_em as iem
from implicit_em import identities
from implicit_em.cli import app

EXPECTED = [
    "lse_gradient",
    "nll_gradient",
    "cross_entropy_gradient",
    "attention_values",
    "attention_scores",
    "hopfield_query",
    "xu_jordan_means",
    "volume_gradient",
    "null_component",
    "null_orders_as_energy",
    "no_competition",
    "candidate_set_gradient",
    "soft_label_gradient",
    "transition_gradient",
    "crowd_gradient",
]


def test_registry_lists_the_fifteen_identities_with_sections():
    assert list(identities.REGISTRY) == EXPECTED
    for identity in identities.REGISTRY.values():
        assert identity.section.startswith("§") and identity.claims


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_identity_holds_to_1e_12(seed):
    for result in identities.run_all(seed=seed):
        assert result.gradcheck, result.name
        assert result.max_abs_error <= 1e-12, result
        assert result.passed


def test_a_wrong_closed_form_fails():
    def wrong_sign(gen: torch.Generator) -> tuple[float, bool]:
        d = torch.randn(4, 3, generator=gen, dtype=torch.float64).requires_grad_(True)
        (grad,) = torch.autograd.grad(iem.lse(d).sum(), d)
        # The sign slip R4 warns about: +r for the maximized L.
        return float((grad - iem.responsibilities(d.detach())).abs().max()), True

    broken = identities.Identity("wrong", "§3.1", "R4", "dL/dd = +r (wrong)", wrong_sign)
    assert not identities.run(broken).passed


def test_register_rejects_duplicates_and_unknown_names():
    with pytest.raises(ValueError, match="already registered"):
        identities.register("lse_gradient", "§3.1", "C1", "again")(lambda gen: (0.0, True))
    with pytest.raises(ValueError, match="unknown identities"):
        identities.run_all(names=["nope"])


def test_verify_prints_a_table_and_json():
    runner = CliRunner()
    result = runner.invoke(app, ["verify"])
    assert result.exit_code == 0, result.output
    for name in EXPECTED:
        assert name in result.output
    assert "15 passed, 0 failed" in result.output
    result = runner.invoke(app, ["verify", "--json", "--only", "lse_gradient"])
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == ["lse_gradient"]
    assert rows[0]["passed"] is True and rows[0]["section"] == "§3.1"


def test_verify_exits_nonzero_on_failure(monkeypatch):
    broken = identities.Identity("broken", "§0", "-", "fails", lambda gen: (1.0, True))
    monkeypatch.setitem(identities.REGISTRY, "broken", broken)
    result = CliRunner().invoke(app, ["verify", "--only", "broken"])
    assert result.exit_code == 1
    assert "FAIL" in result.output
    result = CliRunner().invoke(app, ["verify", "--only", "missing"])
    assert result.exit_code != 0


def test_public_api():
    for name in ("lse", "responsibilities", "objectives", "distances", "attention", "identities"):
        assert hasattr(iem, name)
    assert callable(iem.attention.attention)
    with pytest.raises(AttributeError):
        iem.does_not_exist  # noqa: B018

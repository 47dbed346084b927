"""A criterion's `requires` mark: a failed condition opens the item instead of invalidating the
experiment (`not converged` reads inconclusive; `not testable on this task` casts no vote)."""

from __future__ import annotations

import pytest

from implicit_em.report.items.marks import protocol_marks
from implicit_em.report.items.registry import registry_from_data
from implicit_em.report.judging.item_verdicts import claim_verdicts, verdict_label

CONVERGED = {
    "says": "not converged",
    "reads": "undecided",
    "gates": [{"number": "unconverged_runs", "op": "<=", "threshold": 0}],
}
ROUTING = {
    "says": "not testable on this task",
    "reads": "not tested",
    "gates": [{"number": "routing_cost_bits", "op": ">=", "threshold": 0.05}],
}


def _criterion(status: str, *requires: dict) -> dict:
    return {
        "number": "a",
        "claim": "C12",
        "status": status,
        "direction": "supports",
        "estimate": 1.0,
        "low": 0.5,
        "high": 1.5,
        "op": ">",
        "threshold": 0.0,
        "method": "bca",
        "controls": {"positive": "met", "negative": "not met"},
        "negative_control": {"kind": "realistic", "removes": "the routing, in a trained rival"},
        "requires": list(requires),
    }


def _read(criterion: dict, numbers: dict) -> dict:
    data = {"items": {"C12": {"parts": [{"id": "p", "quote": "q", "criteria": ["E12:a"]}]}}}
    experiment = {
        "id": "E12",
        "verdict": "holds",
        "criteria": [criterion],
        "gates": [],
        "numbers": numbers,
    }
    (got,) = claim_verdicts(["C12"], [experiment], registry_from_data(data))
    return got


@pytest.mark.parametrize("status", ["met", "not met"])
def test_an_unconverged_run_reads_inconclusive_whatever_the_interval(status):
    got = _read(_criterion(status, CONVERGED), {"unconverged_runs": 2.0})
    assert verdict_label(got) == "inconclusive (not converged)"
    assert got["evidence"][0]["standing"] == "not converged"


def test_a_task_where_routing_does_not_matter_is_not_testable():
    got = _read(
        _criterion("met", CONVERGED, ROUTING), {"unconverged_runs": 0, "routing_cost_bits": 0.003}
    )
    assert verdict_label(got) == "not tested (not testable on this task)"
    assert "routing_cost_bits = 0.003" in got["evidence"][0]["why"]


def test_conditions_that_hold_leave_the_vote_to_the_interval():
    numbers = {"unconverged_runs": 0, "routing_cost_bits": 0.4}
    assert _read(_criterion("met", CONVERGED, ROUTING), numbers)["verdict"] == "supported"
    assert _read(_criterion("not met", CONVERGED, ROUTING), numbers)["verdict"] == "refuted"


def test_an_unmeasured_condition_fails():
    got = _read(_criterion("met", ROUTING), {})
    assert got["verdict"] == "not tested"


def test_the_wind_tunnel_protocols_mark_their_requirements():
    for experiment in ("E10", "E11", "E12"):
        marks = protocol_marks(experiment)
        assert all(
            any(r["says"] == "not converged" for r in m.get("requires", [])) for m in marks.values()
        ), experiment
    assert all(
        any(r["says"] == "not testable on this task" for r in m["requires"])
        for m in protocol_marks("E12").values()
    )


TRAINED = {
    "unconverged_runs": 0.0,
    "ce_over_floor_max": 0.01,
    "kl_gain_min": 0.9,
    **{f"refbudget_{task}_budget_share": 1.0 for task in ("bijection", "hmm")},
}
"""Numbers of a wind tunnel whose runs all converged and trained (E11's CE transformer below
half the floor, E12's runs at least halved their KL), routing mattering on E12's task."""


def _wind_tunnel(numbers: dict) -> list[dict]:
    """E10-E12 as results.json holds them, every criterion met, with the registered marks
    attached from their protocols."""
    from implicit_em.report.items.marks import attach_marks

    out = []
    for eid in ("E10", "E11", "E12"):
        criteria = [{**_criterion("met"), "number": n, "requires": []} for n in protocol_marks(eid)]
        out.append(
            {
                "id": eid,
                "verdict": "holds",
                "criteria": criteria,
                "gates": [],
                "numbers": {"routing_init_cost_bits": 0.5, **numbers},
            }
        )
    return attach_marks(out)


def test_c11_reads_inconclusive_not_converged_from_an_unconverged_wind_tunnel():
    """The registered marks (attached from E10's and E11's protocols) and the registered items:
    an unconverged run opens C11 whatever its intervals say; converged, its criteria vote
    (every criterion met: reproduce and MLPs fail for it, and T1's log-loss sigmoids match,
    a working counterexample to the necessity that refutes it whatever the other parts read)."""
    from implicit_em.report.items.registry import load_registry

    (stuck,) = claim_verdicts(
        ["C11"], _wind_tunnel({**TRAINED, "unconverged_runs": 1.0}), load_registry()
    )
    assert verdict_label(stuck) == "inconclusive (not converged)"
    (done,) = claim_verdicts(["C11"], _wind_tunnel(TRAINED), load_registry())
    assert done["verdict"] == "refuted" and "not converged" not in verdict_label(done)
    assert done["decided_by"] == ["necessary"]


@pytest.mark.parametrize(
    "untrained",
    [{"unconverged_runs": 1.0}, {"ce_over_floor_max": 0.9}, {"kl_gain_min": 0.1}],
    ids=["unconverged", "ce-untrained", "kl-not-halved"],
)
def test_every_wind_tunnel_item_reads_inconclusive_where_its_runs_did_not_train(untrained):
    """C11, C12, R3 and T1: a run that did not converge, E11's CE transformer above half the
    floor or an E12 run that did not halve its KL makes each item the failed requirement
    bears on `inconclusive (not converged)`, never a verdict and never `invalid` (the quick
    size's budget cannot reach the plateau rule's `min_steps`)."""
    from implicit_em.report.items.registry import load_registry

    bears = {
        "unconverged_runs": ("C11", "C12", "R3", "T1"),
        # R3's first clause reads E10's prefix MLPs, which E11's CE transformer does not hold
        # open: with every prefix MLP at the floor that clause is against, and a conjunction
        # with a false conjunct is answered whatever the held-open clause reads (below)
        "ce_over_floor_max": ("C11", "T1"),
        "kl_gain_min": ("C12",),
    }[next(iter(untrained))]
    verdicts = claim_verdicts(list(bears), _wind_tunnel({**TRAINED, **untrained}), load_registry())
    for item, got in zip(bears, verdicts, strict=True):
        label = verdict_label(got)
        assert label.startswith("inconclusive (") and "not converged" in label, (item, label)
    if "ce_over_floor_max" in untrained:
        (r3,) = claim_verdicts(["R3"], _wind_tunnel({**TRAINED, **untrained}), load_registry())
        assert r3["verdict"] == "answered"
        assert r3["decided_by"] == ["weighting without a Bayesian fixed point"]

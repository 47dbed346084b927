"""E19: the collapse measures against hand computations, the residual network, a smoke run."""

from __future__ import annotations

import math

import pytest
import torch

from implicit_em.report import select
from implicit_em.report.experiments import _component_use as cu
from implicit_em.report.experiments import _embedding_volume as ev
from implicit_em.report.experiments import _residual_ce as ce
from implicit_em.report.experiments import _residual_collapse as rc
from implicit_em.report.experiments import e19_residual_collapse as e19
from implicit_em.report.experiments._residual_mlp import (
    NORMS,
    PreNormResidualMLP,
    PrototypeHead,
    norm_layer,
)
from implicit_em.report.rules.protocol import load_protocol
from implicit_em.report.running.plan import compute

(E19,) = select(["E19"])
PROTOCOL = load_protocol("E19")


def test_component_use_of_hand_built_responsibilities():
    k = 4
    dealt = torch.eye(k).repeat(3, 1)  # twelve inputs, three to each component
    use = cu.component_use(dealt, dead_mass=0.1)
    assert use["distinct"] == pytest.approx(k)
    assert use["effective"] == pytest.approx(k)
    assert use["dead_share"] == 0.0
    assert use["largest_share"] == pytest.approx(1 / k)
    coincident = torch.full((12, k), 1 / k)
    use = cu.component_use(coincident, dead_mass=0.1)
    assert use["effective"] == pytest.approx(k)  # every component an equal share ...
    assert use["distinct"] == pytest.approx(1.0)  # ... but none tells inputs apart
    one = torch.zeros(12, k)
    one[:, 0] = 1
    use = cu.component_use(one, dead_mass=0.1)
    assert (use["distinct"], use["effective"]) == (pytest.approx(1.0), pytest.approx(1.0))
    assert use["dead_share"] == pytest.approx(3 / 4)
    assert use["largest_share"] == 1.0


def test_distinct_components_is_the_exponential_of_the_mutual_information():
    # two inputs, two components: r = [[0.9, 0.1], [0.1, 0.9]]; mean (0.5, 0.5)
    r = torch.tensor([[0.9, 0.1], [0.1, 0.9]])
    h_mean = math.log(2)
    h_row = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    assert cu.distinct_components(r) == pytest.approx(math.exp(h_mean - h_row))
    assert cu.effective_components(r) == pytest.approx(2.0)


def test_dead_share_counts_mass_below_its_cut():
    # masses 0.7, 0.29, 0.01 of K = 3: the cut 0.1/3 = 0.033 leaves one dead
    r = torch.tensor([[0.7, 0.29, 0.01]])
    assert cu.dead_share(r, 0.1) == pytest.approx(1 / 3)
    assert cu.dead_share(r, 0.02) == 0.0


def test_bad_responsibilities_are_refused():
    with pytest.raises(ValueError, match="non-negative rows summing to one"):
        cu.effective_components(torch.tensor([[0.5, 0.6]]))
    with pytest.raises(ValueError, match=r"\[N, K\]"):
        cu.effective_components(torch.ones(3))
    with pytest.raises(ValueError, match="dead_mass"):
        cu.dead_share(torch.eye(2), 1.5)


@pytest.mark.parametrize("norm", NORMS)
def test_the_residual_network_maps_images_to_its_width(norm):
    net = PreNormResidualMLP(10, 8, 2, norm)
    assert net(torch.randn(5, 10)).shape == (5, 8)
    assert len(net.mlps) == 2


def test_layernorm_without_affine_has_no_parameters_and_a_bad_norm_is_refused():
    assert not list(norm_layer("layernorm_plain", 8).parameters())
    assert len(list(norm_layer("layernorm", 8).parameters())) == 2
    with pytest.raises(ValueError, match="norm must be one of"):
        norm_layer("groupnorm", 8)


def test_the_head_reads_squared_distances_to_prototypes_drawn_from_the_embeddings():
    e = torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    head = PrototypeHead.from_embeddings(e, 2, torch.Generator().manual_seed(0))
    assert all(any(torch.equal(p, row) for row in e) for p in head.prototypes)
    d = PrototypeHead(torch.tensor([[0.0, 0.0], [3.0, 4.0]]))(e)
    assert d.tolist() == [[0.0, 25.0], [25.0, 0.0], [2.0, 13.0]]
    with pytest.raises(ValueError, match="k must be"):
        PrototypeHead.from_embeddings(e, 4, torch.Generator())


def test_the_volume_arms_add_their_terms_and_the_others_fit_the_lse_alone():
    d = torch.rand(16, 4, dtype=torch.float64) * 3
    config = PROTOCOL.sizes["smoke"]
    lse = rc.arm_loss(d, "layernorm", config)
    assert lse == pytest.approx(float(-torch.logsumexp(-d, -1).mean()))
    assert rc.arm_loss(d, "batchnorm", config) == lse
    assert rc.arm_loss(d, "log_det", config) > lse  # a spread of 0..3 has det(Cov) < 1
    with pytest.raises(ValueError, match="arm must be one of"):
        rc.arm_loss(d, "dropout", config)


def test_the_protocol_reads_every_criterion_and_controls_each():
    numbers = {c.number for c in PROTOCOL.criteria}
    assert numbers == set(e19.CONTROLS)
    lse_alone = {"bare", "layernorm", "layernorm_plain", "batchnorm", "weight_decay"}
    for criterion in PROTOCOL.data["criteria"]:
        assert criterion["negative_control"]["kind"] == "realistic"
        if "_ce_" in criterion["number"]:
            arm = criterion["number"].split("_ce_")[1]
            # The log-det optimises the spectrum the effective rank reads: shown, not voted.
            assert ("by_construction" in criterion) == (arm == "log_det"), criterion["number"]
            assert ("baseline" in criterion) == (arm != "bare"), criterion["number"]
            continue
        arm = criterion["number"].split("_share_")[1]
        assert ("baseline" in criterion) == (arm != "bare"), criterion["number"]
        assert ("by_construction" in criterion) == (arm in lse_alone), criterion["number"]
    assert set(PROTOCOL.sizes["quick"]["arms"]) == set(e19.NEGATIVE)
    assert set(PROTOCOL.sizes["quick"]["ce_arms"]) == set(ce.CE_ARMS)
    ce_judged = {n.split("_ce_")[1] for n in numbers if "_ce_" in n}
    assert ce_judged == set(e19.CE_NEGATIVE)
    assert all(e19.CE_NEGATIVE[arm] in ce.CE_ARMS for arm in ce_judged)


def test_effective_rank_of_hand_built_embeddings():
    g = torch.Generator().manual_seed(0)
    iso = torch.randn(4000, 8, generator=g, dtype=torch.float64)
    volume = ev.embedding_volume(iso)
    assert volume["effective_rank"] == pytest.approx(8.0, rel=0.02)  # every direction alike
    assert volume["dead_dims"] == 0.0
    # two directions with variances 9 and 1: spectrum (0.9, 0.1), rank exp H
    two = torch.zeros(4000, 8, dtype=torch.float64)
    two[:, 0], two[:, 1] = 3 * iso[:, 0], iso[:, 1]
    h = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    volume = ev.embedding_volume(two)
    assert volume["effective_rank"] == pytest.approx(math.exp(h), rel=0.03)
    assert volume["dead_dims"] == pytest.approx(6 / 8)
    assert ev.embedding_volume(10 * two)["effective_rank"] == pytest.approx(
        volume["effective_rank"]
    )  # scale-free
    assert ev.embedding_volume(torch.ones(5, 3))["effective_rank"] == 1.0
    with pytest.raises(ValueError, match="N >= 2"):
        ev.embedding_volume(torch.ones(1, 3))


def test_the_ce_plants_read_as_planted():
    e = torch.randn(300, 16, generator=torch.Generator().manual_seed(1)) @ torch.randn(
        16, 16, generator=torch.Generator().manual_seed(2)
    )
    assert ev.embedding_volume(ce.CE_PLANTS["whitened"](e))["effective_rank"] == pytest.approx(16)
    point = ce.CE_PLANTS["point"](e)
    assert torch.allclose(point.mean(0), e.mean(0), atol=1e-5)
    assert float((point - point.mean(0)).norm()) == pytest.approx(
        ce.POINT_SHRINK * float((e - e.mean(0)).norm()), rel=1e-4
    )


TOWARD_FIRST = torch.eye(1, 12)
"""A shift toward the first prototype: the mean embedding nearer it than the others."""


def _classes_around_prototypes(spread: float) -> tuple[torch.Tensor, PrototypeHead]:
    """Ten classes of 50 inputs each, scattered by `spread` around ten prototypes 4 apart."""
    g = torch.Generator().manual_seed(3)
    prototypes = 4 * torch.eye(10, 12)
    e = prototypes.repeat_interleave(50, 0) + spread * torch.randn(500, 12, generator=g)
    return e, PrototypeHead(prototypes)


def test_dominance_reads_a_planted_collapse_as_collapsed_and_a_spread_embedding_not():
    e, head = _classes_around_prototypes(0.5)
    with torch.no_grad():
        spread = ce.dominance(head(e).argmin(-1), 10)
        collapsed = ce.dominance(head(ce.CE_PLANTS["point"](e + TOWARD_FIRST)).argmin(-1), 10)
    assert spread == pytest.approx(0.1, abs=0.02)  # each prototype takes its own class
    assert collapsed == 1.0  # every input near one point: one prototype takes them all
    criterion = next(c for c in PROTOCOL.criteria if c.number == "dominance_ce_bare")
    assert spread < criterion.threshold <= collapsed
    assert ce.dominance(torch.tensor([0, 0, 0, 1]), 10) == 0.75
    with pytest.raises(ValueError, match="non-empty"):
        ce.dominance(torch.tensor([], dtype=torch.long), 10)


def test_dominance_is_read_from_the_nearest_prototype_not_the_softmax_temperature():
    # the same collapse at a twentieth of the scale: every distance small, the responsibilities
    # flat, so the largest softmax mass stays near 1/C while one prototype is nearest to all
    e, head = _classes_around_prototypes(0.5)
    small = PrototypeHead(head.prototypes.detach() / 20)
    collapsed = ce._readings(ce.CE_PLANTS["point"]((e + TOWARD_FIRST) / 20), small, 0.1)
    assert collapsed["largest_share"] < 0.15
    assert collapsed["dominance"] == 1.0


def test_the_ce_objective_is_cross_entropy_over_negative_distances_plus_its_volume_term():
    e = torch.randn(32, 6, dtype=torch.float64)
    d = torch.rand(32, 3, dtype=torch.float64) * 4
    y = torch.randint(0, 3, (32,))
    config = PROTOCOL.sizes["smoke"]
    fit = ce.ce_loss(e, d, y, "bare", config)
    assert fit == pytest.approx(
        float((d.gather(1, y[:, None]).squeeze(1) + torch.logsumexp(-d, -1)).mean())
    )
    assert ce.ce_loss(e, d, y, "layernorm", config) == fit
    volume = ce.ce_loss(e, d, y, "log_det", config) - fit
    assert volume == pytest.approx(config["ce_log_det_weight"] * float(ce.scale_free_log_det(e)))
    assert float(ce.scale_free_log_det(5 * e)) == pytest.approx(float(ce.scale_free_log_det(e)))
    with pytest.raises(ValueError, match="arm must be one of"):
        ce.ce_loss(e, d, y, "dropout", config)


def test_a_smoke_run_reads_each_arm_from_its_own_trainings(tmp_path):
    config = {**PROTOCOL.sizes["smoke"], "device": "cpu"}
    results = {unit.name: compute(unit).value for unit in E19.plan(config)}
    outcome = E19.aggregate(config, results, tmp_path)
    assert set(outcome.samples) == {c.number for c in PROTOCOL.criteria}
    (seed,) = config["seeds"]
    for number, values in outcome.samples.items():
        if "_ce_" in number:
            prefix, arm = number.split("_ce_")
            reading = e19.CE_CRITERIA[prefix]
            assert values == [results[f"ce-{arm}-seed{seed}"]["final"][reading]]
            continue
        measure, arm = number.rsplit("_share_", 1)
        assert values == [results[f"{arm}-seed{seed}"]["final"][f"{measure}_share"]]
    for arm in config["ce_arms"]:
        final = results[f"ce-{arm}-seed{seed}"]["final"]
        assert 1 - 1e-9 <= final["effective_rank"] <= config["width"] + 1e-9
        assert 1 - 1e-9 <= final["distinct"] <= final["effective"] + 1e-9 <= 10 + 1e-9
        assert outcome.numbers[f"accuracy_ce_{arm}"] == final["accuracy"]
        assert outcome.numbers[f"distinct_share_ce_{arm}"] == final["distinct_share"]
        assert 0.1 <= final["dominance"] <= 1
        assert outcome.numbers[f"dominance_ce_{arm}"] == final["dominance"]
    k = config["components"]
    for arm in config["arms"]:
        final = results[f"{arm}-seed{seed}"]["final"]
        assert 1 - 1e-9 <= final["distinct"] <= final["effective"] + 1e-9 <= k + 1e-9
        assert outcome.numbers[f"loss_drop_{arm}"] == pytest.approx(
            final["loss_start"] - final["loss_end"]
        )
        assert 0 <= outcome.numbers[f"knn_{arm}"] <= 1
    assert (tmp_path / "residual_components.png").exists()

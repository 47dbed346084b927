"""The tracer on classification and mixture sites: discovery, identities, bad input."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

from implicit_em import objectives
from implicit_em.distances import SquaredEuclidean
from implicit_em.trace import CollapseWarning, NoSiteError, Tracer

from .conftest import assert_same_parameters, site_records, train


def _digits(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    data = load_digits()
    x = torch.tensor(data.data[:n] / 16.0, dtype=torch.float32)
    return x, torch.tensor(data.target[:n])


def _distance_classifier() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 32), nn.Tanh(), SquaredEuclidean(32, 10))


X, Y = _digits()


def _digits_step(model: nn.Module) -> torch.Tensor:
    return F.cross_entropy(-model(X[:64]), Y[:64])


def test_digits_distance_head_reads_softmax_and_leaves_training_unchanged():
    plain, _ = train(_distance_classifier, _digits_step, 6, None)
    traced, tracer = train(_distance_classifier, _digits_step, 6, {"every": 1})
    assert_same_parameters(plain, traced)
    records = site_records(tracer)
    assert [r["site"] for r in records] == ["2.ce"] * 6
    for r in records:
        assert r["source"] == "gradient"
        assert r["residual"] <= 1e-5
        assert r["rows"] == 64 and r["K"] == 10
        assert abs(sum(r["mass"]) - 1) < 1e-5
        assert 1 <= r["effective_k"] <= 10


def test_probe_churn_is_measured_and_training_unchanged():
    xp, yp = X[200:256], Y[200:256]
    holder: dict[str, nn.Module] = {}

    def make() -> nn.Module:
        holder["m"] = _distance_classifier()
        return holder["m"]

    plain, _ = train(_distance_classifier, _digits_step, 5, None)
    traced, tracer = train(
        make, _digits_step, 5, {"probe": lambda: F.cross_entropy(-holder["m"](xp), yp)}
    )
    assert_same_parameters(plain, traced)
    churn = [r["churn"] for r in tracer.history if r["kind"] == "site"]
    assert churn[0] is None
    assert all(0.0 <= c <= 1.0 for c in churn[1:])
    assert site_records(tracer)[0]["missing"] == ["churn"]


def test_every_measures_only_those_steps():
    _, tracer = train(_distance_classifier, _digits_step, 7, {"every": 3})
    assert [r["step"] for r in tracer.history if r["kind"] == "site"] == [0, 3, 6]


def test_measure_first_measures_the_first_steps_then_every_every_th():
    plain, _ = train(_distance_classifier, _digits_step, 11, None)
    traced, tracer = train(_distance_classifier, _digits_step, 11, {"every": 4, "measure_first": 3})
    assert_same_parameters(plain, traced)
    assert [r["step"] for r in tracer.history if r["kind"] == "site"] == [0, 1, 2, 4, 8]


def test_nll_of_log_softmax_and_cross_entropy_options():
    torch.manual_seed(1)
    z = torch.randn(20, 5, requires_grad=True)
    y = torch.randint(0, 5, (20,))
    y[3] = -100
    with Tracer() as tracer:
        F.nll_loss(F.log_softmax(z, dim=1), y).backward()
        tracer.step()
        (3.0 * F.cross_entropy(z, y, label_smoothing=0.1)).backward()
        tracer.step()
        F.cross_entropy(z, y.clamp_min(0), weight=torch.rand(5) + 0.5).backward()
        tracer.step()
        F.cross_entropy(z, y.clamp_min(0), reduction="none").pow(2).sum().backward()
        tracer.step()
        F.cross_entropy(z.view(4, 5, 5).transpose(1, 2), y.clamp_min(0).view(4, 5)).backward()
        tracer.step()
        soft = torch.softmax(torch.randn(20, 5), dim=1)
        (0.5 * F.cross_entropy(z, soft, label_smoothing=0.2)).backward()
        tracer.step()
        # class weights with smoothing or soft targets: the row weight is sum_j w_j t'_j
        weight = torch.rand(5) + 0.5
        F.cross_entropy(z, y, weight=weight, label_smoothing=0.1).backward()
        tracer.step()
        F.cross_entropy(z, soft, weight=weight, label_smoothing=0.3, reduction="sum").backward()
        tracer.step()
    records = site_records(tracer)
    assert [r["site"] for r in records] == ["nll"] + ["ce"] * 7
    assert records[0]["rows"] == 19
    for r in records:
        assert r["residual"] <= 1e-5, r


def test_package_objectives_are_sites():
    torch.manual_seed(2)
    layer = SquaredEuclidean(3, 4)
    x = torch.randn(30, 3)
    prior = objectives.MixtureNLL(4, learnable_prior=True)
    with Tracer(nn.ModuleDict({"dist": layer, "prior": prior})) as tracer:
        objectives.mixture_nll(layer(x)).backward()
        tracer.step()
        prior(layer(x)).mul(0.5).backward()
        tracer.step()
        objectives.cross_entropy(
            layer(x), torch.randint(0, 4, (30,)), label_smoothing=0.2
        ).backward()
        tracer.step()
    records = site_records(tracer)
    assert [(r["site"], r["type"]) for r in records] == [
        ("dist.mixture", "mixture"),
        ("dist.mixture", "mixture"),
        ("dist.ce", "classification"),
    ]
    for r in records:
        assert r["source"] == "gradient" and r["residual"] <= 1e-5


def test_site_selection_by_pattern():
    mha = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 3)
    x = torch.randn(2, 5, 8)
    with Tracer(mha, sites="layers.[02].*") as tracer:
        mha(x).sum().backward()
        tracer.step()
    assert tracer.history.sites() == ["layers.0.self_attn", "layers.2.self_attn"]


def test_no_site_lists_what_was_searched():
    model = nn.Linear(4, 2)
    with pytest.raises(NoSiteError) as err, Tracer(model) as tracer:
        model(torch.randn(3, 4)).pow(2).sum().backward()
        tracer.step()
    text = str(err.value)
    assert "no traceable site in Linear" in text
    assert "scaled_dot_product_attention" in text and "cross_entropy" in text
    assert "mixture_nll" in text


def test_pattern_matching_nothing_lists_found_sites():
    z = torch.randn(4, 3, requires_grad=True)
    with (
        pytest.raises(NoSiteError, match=r"not selected by sites=\['attn\*'\]: \['ce'\]"),
        Tracer(sites="attn*") as tracer,
    ):
        F.cross_entropy(z, torch.tensor([0, 1, 2, 0])).backward()
        tracer.step()


def test_without_backward_gradient_metrics_are_missing_not_zero():
    model = nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    with Tracer(model) as tracer:
        with torch.no_grad():
            F.cross_entropy(model(x), y)
        tracer.step()
        F.cross_entropy(model(x), y)
        tracer.step()
    for r in tracer.history:
        assert r["source"] == "forward"
        assert r["residual"] is None and r["wrong_top"] is None
        assert {"residual", "wrong_entropy", "wrong_top"} <= set(r["missing"])
        assert abs(sum(r["mass"]) - 1) < 1e-6


@pytest.mark.parametrize(
    "backward",
    [
        lambda loss: loss.backward(),
        lambda loss: (0.5 * loss).backward(),
        lambda loss: loss.backward(torch.tensor(3.0)),
        lambda loss: torch.autograd.backward(loss),
        lambda loss: (loss + loss.detach() ** 2).backward(),
        lambda loss: (loss.item(), loss.backward()),
    ],
    ids=["plain", "scaled", "seed", "autograd", "sum", "item-first"],
)
def test_responsibilities_are_read_whichever_way_backward_is_called(backward):
    """The loss's upstream gradient is 1 for ``loss.backward()`` (no hook needed) and read by a
    hook otherwise: either way the responsibilities read from the gradient equal the forward
    softmax."""
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model) as tracer:
        for _ in range(5):
            backward(F.cross_entropy(model(x), y))
            opt.step()
            opt.zero_grad()
            tracer.step()
    assert [r["step"] for r in tracer.history] == [0, 1, 2, 3, 4]
    for r in tracer.history:
        assert r["source"] == "gradient" and r["residual"] <= 1e-6


def test_a_backward_after_its_step_changes_no_measurement():
    """The gradient hooks of a measured step do nothing once ``tracer.step()`` took it: a
    backward after the step leaves its measurement without gradients."""
    model = nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    with Tracer(model, flush_every=4) as tracer:
        late = F.cross_entropy(model(x), y)
        tracer.step()
        late.backward()
        for _ in range(3):
            F.cross_entropy(model(x), y).backward()
            tracer.step()
    first, *rest = tracer.history
    assert first["source"] == "forward" and first["residual"] is None
    assert [r["source"] for r in rest] == ["gradient"] * 3
    assert all(r["residual"] <= 1e-5 for r in rest)


def test_nonfinite_gradients_raise_an_alarm_and_stay_out_of_averages():
    z = torch.randn(6, 3, requires_grad=True)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    weight = torch.where(torch.arange(6) == 2, torch.nan, 1.0)  # row 2's gradient is NaN
    with warnings.catch_warnings(record=True) as caught, Tracer() as tracer:
        warnings.simplefilter("always")
        for _ in range(2):
            (F.cross_entropy(z, y, reduction="none") * weight).sum().backward()
            tracer.step()
    site = site_records(tracer)
    assert all(r["nonfinite"] == 1 and r["rows"] == 5 for r in site)
    assert all(r["residual"] <= 1e-6 for r in site)
    assert [a["step"] for a in tracer.alarms if a["alarm"] == "nonfinite_gradient"] == [0, 1]
    nonfinite_warnings = [w for w in caught if "non-finite" in str(w.message)]
    assert len(nonfinite_warnings) == 1
    assert issubclass(nonfinite_warnings[0].category, CollapseWarning)


def test_collapse_alarms_fire_on_a_collapsed_mixture():
    d = torch.tensor([[0.0, 30.0, 30.0]]).repeat(16, 1).requires_grad_()
    with pytest.warns(CollapseWarning), Tracer() as tracer:
        objectives.mixture_nll(d).backward()
        tracer.step()
    kinds = {a["alarm"] for a in tracer.alarms}
    assert {"dominance", "effective_k", "dead_components"} <= kinds
    assert all(a["site"] == "mixture" and a["step"] == 0 for a in tracer.alarms)


def test_step_outside_the_block_is_an_error():
    tracer = Tracer()
    with pytest.raises(RuntimeError, match="inside"):
        tracer.step()
    with pytest.raises(ValueError, match="every"):
        Tracer(every=0)
    with pytest.raises(ValueError, match="measure_first must be a non-negative integer"):
        Tracer(measure_first=-1)


def test_paused_code_is_not_captured_and_the_measured_step_resumes():
    torch.manual_seed(0)
    model = _distance_classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with Tracer(model, every=1) as tracer:
        for i in range(4):
            scores = -model(X[:64])
            with tracer.paused():
                F.cross_entropy(-model(X[100:200]), Y[100:200])
            loss = F.cross_entropy(scores, Y[:64])
            loss.backward()
            opt.step()
            opt.zero_grad()
            if i == 1:
                with tracer.paused():
                    F.cross_entropy(-model(X[:10]), Y[:10]).backward()
                    opt.zero_grad()
            tracer.step()
    records = site_records(tracer)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert all(r["rows"] == 64 and r["source"] == "gradient" for r in records)
    assert all(r["residual"] <= 1e-5 for r in records)


def test_an_evaluation_under_pause_is_not_recorded_as_the_training_site():
    """An evaluation forward pass of an nn.MultiheadAttention model inside ``paused()`` (after
    ``tracer.step()``, before the next training step) leaves no trace: each step records the
    training batch's attention site once, with its own rows."""
    torch.manual_seed(0)
    model = nn.MultiheadAttention(8, 2, batch_first=True)
    x, x_eval = torch.randn(4, 5, 8), torch.randn(3, 7, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Tracer(model, every=1) as tracer:
        for _ in range(3):
            model(x, x, x)[0].pow(2).sum().backward()
            opt.step()
            opt.zero_grad()
            tracer.step()
            with tracer.paused(), torch.no_grad():
                model.eval()
                model(x_eval, x_eval, x_eval)
                model.train()
    records = site_records(tracer)
    assert [(r["step"], r["site"]) for r in records] == [(s, "attention") for s in range(3)]
    assert all(r["rows"] == 2 * 5 and r["routing_norm"] > 0 for r in records)


def test_paused_outside_the_block_is_an_error():
    tracer = Tracer(_distance_classifier())
    with pytest.raises(RuntimeError, match="inside"), tracer.paused():
        pass


def test_package_objectives_with_volume_axes_and_reductions():
    """The objectives announce their per-sample loss at their hook point, so the row factor is
    read whatever the reduction and whatever is done with the loss afterwards; the volume term,
    the prior and a component axis other than the last are part of the announced logits."""
    torch.manual_seed(5)
    d = (torch.rand(4, 6, 3) * 3).requires_grad_()
    log_det = torch.randn(4, 1, 1) * 0.3
    log_prior = torch.log_softmax(torch.randn(4, 1, 1), dim=0)
    with Tracer() as tracer:
        objectives.mixture_nll(d, log_prior, log_det, dim=0, reduction="sum").backward()
        tracer.step()
        loss = objectives.cross_entropy(d, torch.randint(0, 4, (6, 3)), dim=0, reduction="none")
        loss.pow(2).sum().backward()
        tracer.step()
        y = torch.randint(0, 6, (4, 3))
        objectives.cross_entropy(d, y, dim=1, label_smoothing=0.1).backward()
        tracer.step()
    records = site_records(tracer)
    assert [(r["site"], r["K"], r["rows"]) for r in records] == [
        ("mixture", 4, 18.0),
        ("ce", 4, 18.0),
        ("ce", 6, 12.0),
    ]
    for r in records:
        assert r["source"] == "gradient" and r["residual"] <= 1e-5, r


def test_hook_point_is_a_no_op_outside_a_tracer():
    from implicit_em.hook_points import hook_point

    loss = torch.ones(3, requires_grad=True)
    assert hook_point("mixture_nll", loss, d=loss, dim=-1) is None
    assert loss.grad is None and loss.grad_fn is None


def test_a_backward_under_pause_reaches_no_site():
    """The gradient hooks of a measured step do nothing under ``paused()``."""
    model = nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    with Tracer(model) as tracer:
        loss = F.cross_entropy(model(x), y)
        with tracer.paused():
            loss.backward()
        tracer.step()
        F.cross_entropy(model(x), y).backward()
        tracer.step()
    assert [r["source"] for r in tracer.history] == ["forward", "gradient"]


def test_a_large_site_is_measured_on_an_evenly_strided_sample_of_its_rows():
    """Above `max_responsibility_rows` rows a site keeps every stride-th row; the identity still
    holds on them (the mean's denominator and class weights are those of all rows), and the
    averages agree with the full measurement to sampling accuracy."""
    torch.manual_seed(3)
    z = (2 * torch.randn(4000, 7)).requires_grad_()
    y = torch.randint(0, 7, (4000,))
    y[::5] = -100
    weight = torch.rand(7) + 0.5
    measured = {}
    for cap in (None, 512):
        with Tracer(max_responsibility_rows=cap) as tracer:
            F.cross_entropy(z, y, weight=weight, label_smoothing=0.1).backward()
            tracer.step()
            F.cross_entropy(z, torch.softmax(z.detach(), 1), reduction="sum").backward()
            tracer.step()
        measured[cap] = site_records(tracer)
    full, sampled = measured[None], measured[512]
    assert full[0]["rows"] == 3200 and sampled[0]["rows"] == 400  # every 8th row, 1 in 5 ignored
    assert full[1]["rows"] == 4000 and sampled[1]["rows"] == 500
    for a, b in zip(full, sampled, strict=True):
        assert b["residual"] <= 1e-5 and b["source"] == "gradient"
        torch.testing.assert_close(
            torch.tensor(b["mass"]), torch.tensor(a["mass"]), atol=0.03, rtol=0
        )
        assert abs(a["entropy"] - b["entropy"]) < 0.05


def test_sampled_rows_still_count_every_nonfinite_gradient_row():
    z = torch.randn(1000, 3, requires_grad=True)
    y = torch.randint(0, 3, (1000,))
    weight = torch.where(torch.arange(1000) == 1, torch.nan, 1.0)  # row 1's gradient is NaN
    with warnings.catch_warnings(), Tracer(max_responsibility_rows=100) as tracer:
        warnings.simplefilter("ignore")
        (F.cross_entropy(z, y, reduction="none") * weight).mean().backward()
        tracer.step()
    (site,) = site_records(tracer)
    assert site["rows"] == 100 and site["nonfinite"] == 1  # row 1 is not in the sample
    assert any(a["alarm"] == "nonfinite_gradient" for a in tracer.alarms)


def test_package_objectives_on_sampled_rows():
    torch.manual_seed(4)
    layer = SquaredEuclidean(3, 4)
    x = torch.randn(900, 3)
    with Tracer(layer, max_responsibility_rows=128) as tracer:
        objectives.mixture_nll(layer(x)).backward()
        tracer.step()
        objectives.cross_entropy(layer(x), torch.randint(0, 4, (900,))).backward()
        tracer.step()
    for r in site_records(tracer):
        assert r["rows"] == 113 and r["residual"] <= 1e-5, r  # every 8th of 900 rows
    with pytest.raises(ValueError, match="max_responsibility_rows"):
        Tracer(max_responsibility_rows=0)

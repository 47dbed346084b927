"""C3's arms: each objective's gradient in d is the weight it claims, on small worked examples."""

from __future__ import annotations

import torch

from implicit_em.report.experiments import _conditions as cd


def _grad(arm: str, d: torch.Tensor) -> torch.Tensor:
    d = d.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(cd.OBJECTIVES[arm](d).sum(), d)
    return grad


def test_sparsemax_weights_match_the_worked_example_of_martins_and_astudillo():
    # z = (1, 0.8, -1): support {1, 2}, threshold tau = (1 + 0.8 - 1) / 2 = 0.4, p = z - tau.
    d = -torch.tensor([[1.0, 0.8, -1.0]], dtype=torch.float64)
    expected = torch.tensor([[0.6, 0.4, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(_grad("sparsemax", d), expected)
    # The objective is the conjugate -max_p <p, z> - |p|^2 / 2 at that p.
    value = -(expected * -d).sum() + 0.5 * (expected**2).sum()
    torch.testing.assert_close(cd.OBJECTIVES["sparsemax"](d).sum(), value)


def test_softmax_weights_are_responsibilities_and_unnormalized_weights_are_exponentials():
    d = torch.tensor([[0.3, 1.2, 2.5], [4.0, 0.1, 0.2]], dtype=torch.float64)
    torch.testing.assert_close(_grad("softmax", d), torch.softmax(-d, dim=-1))
    torch.testing.assert_close(_grad("unnormalized", d), torch.exp(-d))
    sums = torch.exp(-d).sum(-1)  # no normalizer: the weights do not sum to one
    assert float((sums - 1.0).abs().min()) > 0.1


def test_straight_through_rounds_forward_and_passes_the_gradient_through():
    d = torch.tensor([[0.3, 1.2, 2.6]], dtype=torch.float64)
    rounded = torch.round(d)
    torch.testing.assert_close(
        cd.OBJECTIVES["straight_through"](d), cd.OBJECTIVES["softmax"](rounded)
    )
    torch.testing.assert_close(_grad("straight_through", d), torch.softmax(-rounded, dim=-1))


def test_coverage_counts_the_clusters_that_own_a_prototype():
    assert cd.coverage(cd.CENTRES.clone()) == 1.0
    assert cd.coverage(cd.CENTRES[[0, 0, 0, 0]] + 0.1) == 0.25
    assert cd.coverage(cd.CENTRES[[0, 1, 1, 3]] - 0.2) == 0.75


def test_unnormalized_prototypes_stay_in_their_cluster_and_softmax_ones_leave_it():
    x = cd.clusters(200, 0, 0.5)
    start = cd.collapsed_start(x, 4, 0, 0.1)
    stuck = cd.train("unnormalized", x, start, 1.0, 2.0, 200)
    spread = cd.train("softmax", x, start, 1.0, 2.0, 200)
    assert cd.coverage(stuck) == 0.25
    assert cd.coverage(spread) >= 0.75


def test_gradient_free_arm_fits_the_softmax_objective_within_its_budget():
    x = cd.clusters(200, 0, 0.5)
    start = cd.collapsed_start(x, 4, 0, 0.1)
    frozen = cd.train("gradient_free", x, start, 1.0, 0.0, 40)
    torch.testing.assert_close(frozen, start)
    fitted = cd.train("gradient_free", x, start, 1.0, 2.0, 40)
    before = cd.mean_objective("softmax", x, start, 1.0)
    assert cd.mean_objective("softmax", x, fitted, 1.0) < before
    calls = []
    saved = cd.OBJECTIVES["softmax"]

    def counted(d):
        calls.append(1)
        return saved(d)

    cd.OBJECTIVES["softmax"] = counted
    try:
        cd.train("gradient_free", x, start, 1.0, 2.0, 5)
    finally:
        cd.OBJECTIVES["softmax"] = saved
    assert len(calls) <= cd.EVALUATIONS_PER_STEP * 5 + 1


def test_loss_drop_reads_the_arms_own_objective():
    from implicit_em.report.experiments import e15_conditions as e15

    config = {"n": 200, "spread": 0.5, "jitter": 0.1, "learning_rate": 2.0, "steps": 40}
    x = cd.clusters(200, 0, 0.5)
    start = cd.collapsed_start(x, 4, 0, 0.1)
    assert e15.loss_drop(config, 0, "softmax", start, 1.0) == 0.0
    end = e15.trained(config, 0, "softmax", bandwidth=1.0)
    assert e15.loss_drop(config, 0, "softmax", end, 1.0) > 0.05

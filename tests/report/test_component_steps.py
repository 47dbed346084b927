"""Per-component steps 1/N_j against their closed form on a small worked example."""

from __future__ import annotations

import torch

from implicit_em.mixture.covariance import covariance_model
from implicit_em.mixture.parameters import Mixture
from implicit_em.mixture.step_rules import GradientRule
from implicit_em.report.experiments._component_steps import ComponentStepRule

X = torch.tensor(
    [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [4.0, 4.0], [5.0, 4.0], [4.0, 5.5]],
    dtype=torch.float64,
)


def _mixture() -> Mixture:
    covariances = torch.stack([torch.eye(2), torch.tensor([[2.0, 0.5], [0.5, 1.0]])]).double()
    return Mixture.from_covariances(
        covariance_model("full"),
        torch.tensor([0.7, 0.3], dtype=torch.float64),
        torch.tensor([[1.0, 1.0], [3.0, 3.0]], dtype=torch.float64),
        covariances,
    )


def _step(rule: GradientRule, mixture: Mixture) -> Mixture:
    rule.begin(mixture)
    rule.accumulate(X)
    return rule.step()[0]


def test_means_move_toward_the_responsibility_weighted_mean_in_the_metric_sigma_inverse():
    mixture, lr = _mixture(), 0.3
    stepped = _step(ComponentStepRule(0.0, lr), mixture)
    log_joint = torch.stack(
        [
            torch.distributions.MultivariateNormal(m, c).log_prob(X) + torch.log(w)
            for w, m, c in zip(mixture.weights, mixture.means, mixture.covariances, strict=True)
        ],
        dim=1,
    )
    r = torch.softmax(log_joint, dim=1)
    masses = r.sum(0)
    targets = (r.T @ X) / masses[:, None]
    expected = mixture.means + lr * torch.linalg.solve(
        mixture.covariances, (targets - mixture.means).unsqueeze(-1)
    ).squeeze(-1)
    torch.testing.assert_close(stepped.means, expected)


def test_only_the_component_step_sizes_differ_from_plain_gradient_descent():
    mixture, lr = _mixture(), 0.3
    plain, component = (
        _step(GradientRule(0.0, lr), mixture),
        _step(ComponentStepRule(0.0, lr), mixture),
    )
    torch.testing.assert_close(plain.weights, component.weights)
    plain_steps = plain.means - mixture.means
    component_steps = component.means - mixture.means
    ratio = component_steps / plain_steps
    # component j's step is N / N_j times plain gradient descent's, the same for both coordinates
    torch.testing.assert_close(ratio[:, 0], ratio[:, 1])
    assert float(ratio.min()) > 1.0

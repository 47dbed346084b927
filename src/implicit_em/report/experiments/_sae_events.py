r"""E20's sparse autoencoder: dead latents from an L1 penalty, on real activations.

Activations: the hidden layer (after its ReLU) of a one-hidden-layer MLP classifier trained on
a Fashion-MNIST subset (`mlp_steps` Adam steps from the run's seed), on the training and test
images, centred by the training mean and scaled to unit mean squared norm. The autoencoder (Bricken et al. 2023's form): $z = \operatorname{ReLU}(W_e(a - b_d) +
b_e)$ with `latents` units, $\hat a = W_d z + b_d$, loss $\lVert a - \hat a\rVert^2 +
\lambda\lVert z\rVert_1$ (mean over the batch), $\lambda$ = `config["l1"][arm]`, Adam.

Ground truth, afterwards: a latent is dead when it fires ($z > 0$) on none of the held-out
activations at the end; its onset is one step after the last training batch on which it fired.
The run has an event when at least `dead_event_share` of the latents are dead.

The tracer reads responsibilities where a softmax turns energies into probabilities; a ReLU
autoencoder under a squared error has none, so the tracer is expected to find no site here
(`RunLog.traced` False): the run records what it found, and the practitioner's monitors are
read all the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.report.experiments._event_training import onset_of, run_reading, train_traced
from implicit_em.report.experiments._neural import images_of

__all__ = ["SparseAutoencoder", "activations", "sae_run"]


def activations(config: Mapping[str, Any], seed: int) -> tuple[Tensor, Tensor]:
    """The hidden activations `[N, hidden]` of an MLP trained on `config`'s images from seed
    `seed`, on the training and the test images (on the CPU); trained once per process for
    the same data, MLP and seed (both arms of a seed read the same activations)."""
    keys = ("data", "n_train", "n_test", "mlp_hidden", "mlp_steps", "batch")
    return _activations(json.dumps({k: config[k] for k in keys}, sort_keys=True), seed)


@lru_cache(maxsize=4)
def _activations(key: str, seed: int) -> tuple[Tensor, Tensor]:
    config = json.loads(key)
    images = images_of({**config, "device": "cpu"})
    torch.manual_seed(seed)
    mlp = nn.Sequential(
        nn.Linear(images.x_train.shape[1], config["mlp_hidden"]),
        nn.ReLU(),
        nn.Linear(config["mlp_hidden"], len(images.classes)),
    )
    opt = torch.optim.Adam(mlp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(config["mlp_steps"]):
        b = torch.randint(0, images.x_train.shape[0], (config["batch"],), generator=g)
        loss = F.cross_entropy(mlp(images.x_train[b]), images.y_train[b])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return mlp[:2](images.x_train), mlp[:2](images.x_test)


class SparseAutoencoder(nn.Module):
    """`forward(a [N, d])` gives the reconstruction `[N, d]` and the latents `[N, latents]`.
    Initialized as Bricken et al. (2023): unit-norm decoder columns, the encoder their
    transpose, zero biases."""

    def __init__(self, dim: int, latents: int) -> None:
        super().__init__()
        self.encoder = nn.Linear(dim, latents)
        self.decoder = nn.Linear(latents, dim)
        with torch.no_grad():
            self.decoder.weight /= self.decoder.weight.norm(dim=0, keepdim=True)
            self.encoder.weight.copy_(self.decoder.weight.T)
            self.encoder.bias.zero_()
            self.decoder.bias.zero_()

    def forward(self, a: Tensor) -> tuple[Tensor, Tensor]:
        z = torch.relu(self.encoder(a - self.decoder.bias))
        return self.decoder(z), z


def sae_run(config: Mapping[str, Any], seed: int, arm: str) -> dict[str, Any]:
    """Train the autoencoder of `config` on the activations of seed `seed`'s MLP under arm
    `arm` (L1 coefficient `config["l1"][arm]`); the run's reading (`run_reading`) with the
    dead latents' share and the held-out reconstruction error (relative to the variance)."""
    train, test = activations(config, seed)
    mean = train.mean(0)
    scale = (train - mean).pow(2).sum(1).mean().sqrt()
    train, test = (train - mean) / scale, (test - mean) / scale
    latents, steps, batch = config["latents"], config["steps"], config["batch"]
    torch.manual_seed(seed)
    model = SparseAutoencoder(train.shape[1], latents)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    l1 = config["l1"][arm]
    g = torch.Generator().manual_seed(seed + 1)
    order = torch.randint(0, train.shape[0], (steps, batch), generator=g)
    last_active = torch.full((latents,), -1)

    def loss_of(t: int) -> Tensor:
        a = train[order[t]]
        recon, z = model(a)
        fired = (z.detach() > 0).any(0)
        last_active[fired] = t
        return (a - recon).pow(2).sum(1).mean() + l1 * z.abs().sum(1).mean()

    log = train_traced(model, opt, loss_of, steps, config["every"], lambda t: None)
    with torch.no_grad():
        recon, z = model(test)
    dead = (~(z > 0).any(0)).tolist()
    share = sum(dead) / latents
    onset = onset_of(last_active.tolist(), dead) if share >= config["dead_event_share"] else None
    reading = run_reading(log, onset, steps, config["monitor"])
    variance = (test - test.mean(0)).pow(2).sum(1).mean()
    reading.update(
        dead_share=share,
        recon_error=float((test - recon).pow(2).sum(1).mean() / variance),
    )
    return reading

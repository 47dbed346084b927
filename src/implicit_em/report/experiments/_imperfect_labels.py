"""E16's data and settings: PCA features of a fixed Fashion-MNIST subset, the supervision each arm gives (a few labels, candidate sets, noisy labels, a crowd), and the field's rivals fitted to it."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em.data import load_dataset
from implicit_em.report.experiments import _partial_clamps as pc

ARMS = ("semi", "partial", "noisy_sym", "noisy_asym", "crowd")


def features(config: dict[str, Any]) -> dict[str, Tensor]:
    """`_features` of the configuration's data set and sizes (computed once per process)."""
    keys = ("data", "n_train", "n_val", "n_test", "pca_dim")
    return _features(*(config[k] for k in keys))


@cache
def _features(data_set: str, n_train: int, n_val: int, n_test: int, pca_dim: int) -> dict:
    """PCA features of a fixed random subset of Fashion-MNIST: `n_train` training rows,
    `n_val` validation rows (both from the training split) and `n_test` test rows, scaled so
    that a feature has unit variance on average."""
    from sklearn.decomposition import PCA

    data = load_dataset(data_set)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(data.y_train))
    train = order[:n_train]
    val = order[n_train : n_train + n_val]
    test = rng.permutation(len(data.y_test))[:n_test]
    pca = PCA(pca_dim, random_state=0).fit(data.x_train[train])
    scale = float(np.sqrt(pca.explained_variance_.mean()))

    def z(x: np.ndarray) -> Tensor:
        return torch.from_numpy(pca.transform(x) / scale).float()

    return {
        "z_train": z(data.x_train[train]),
        "y_train": torch.from_numpy(data.y_train[train]),
        "z_val": z(data.x_train[val]),
        "y_val": torch.from_numpy(data.y_train[val]),
        "z_test": z(data.x_test[test]),
        "y_test": torch.from_numpy(data.y_test[test]),
    }


def _other_class(y: Tensor, k: int, generator: torch.Generator) -> Tensor:
    return (y + torch.randint(1, k, y.shape, generator=generator)) % k


def _annotators(y: Tensor, k: int, config: dict[str, Any], generator: torch.Generator) -> Tensor:
    """`[N, A]` labels: annotator a is right with probability p_a ~ U(low, high); a wrong label
    is the next class with probability `config["crowd_bias"]`, else a random other class."""
    low, high = config["crowd_accuracy"]
    n, a = len(y), config["annotators"]
    right_p = low + (high - low) * torch.rand(a, generator=generator)
    right = torch.rand(n, a, generator=generator) < right_p
    biased = torch.rand(n, a, generator=generator) < config["crowd_bias"]
    wrong = torch.where(
        biased,
        ((y + 1) % k)[:, None].expand(n, a),
        _other_class(y[:, None].expand(n, a), k, generator),
    )
    return torch.where(right, y[:, None].expand(n, a), wrong)


def supervise(
    arm: str, y: Tensor, k: int, config: dict[str, Any], seed: int
) -> tuple[pc.Supervision, Tensor]:
    """The arm's supervision of the training rows, and its naive hard labels (the labelled
    rows' labels, a random candidate, the noisy label, the majority vote) that every fitter and
    rival starts from; for `semi` the naive labels are -1 on unlabeled rows."""
    g = torch.Generator().manual_seed(1000 * ARMS.index(arm) + seed)
    n = len(y)
    if arm == "semi":
        per_class = max(1, round(config["label_fraction"] * n / k))
        labelled = torch.zeros(n, dtype=torch.bool)
        for c in range(k):
            rows = torch.nonzero(y == c).flatten()
            labelled[rows[torch.randperm(len(rows), generator=g)[:per_class]]] = True
        mask = torch.ones(n, k, dtype=torch.bool)
        mask[labelled] = torch.nn.functional.one_hot(y[labelled], k).bool()
        return pc.Supervision("mask", mask, joint=True), torch.where(labelled, y, -1)
    if arm == "partial":
        mask = torch.nn.functional.one_hot(y, k).bool()
        while int(mask.sum(1).min()) < config["candidates"]:
            extra = _other_class(y, k, g)
            short = mask.sum(1) < config["candidates"]
            mask[torch.arange(n)[short], extra[short]] = True
        naive = torch.multinomial(mask.float(), 1, generator=g).flatten()
        return pc.Supervision("mask", mask), naive
    if arm in ("noisy_sym", "noisy_asym"):
        flip = torch.rand(n, generator=g) < config["noise"]
        other = _other_class(y, k, g) if arm == "noisy_sym" else (y + 1) % k
        noisy = torch.where(flip, other, y)
        known = (
            _transition(arm, k, config["noise"]) if config.get("plant") == "noise_known" else None
        )
        return pc.Supervision("noisy", noisy, known=known), noisy
    labels = _annotators(y, k, config, g)
    votes = torch.nn.functional.one_hot(labels, k).sum(1).float()
    majority = (votes + 1e-3 * torch.rand(n, k, generator=g)).argmax(1)  # random tie-break
    return pc.Supervision("crowd", labels), majority


def _transition(arm: str, k: int, noise: float) -> Tensor:
    r"""The true transition of a noisy arm: $T_{jl} = P(\tilde y = l \mid y = j)$."""
    eye = torch.eye(k)
    if arm == "noisy_sym":
        return (1 - noise) * eye + noise * (1 - eye) / (k - 1)
    return (1 - noise) * eye + noise * torch.roll(eye, 1, dims=1)


def class_means(z: Tensor, labels: Tensor, k: int) -> Tensor:
    """Each class's mean over the rows labelled with it (the overall mean for a class none is)."""
    means = [z[labels == c].mean(0) if bool((labels == c).any()) else z.mean(0) for c in range(k)]
    return torch.stack(means)


def clean_accuracies(data: dict[str, Tensor], config: dict[str, Any]) -> dict[str, float]:
    """Test accuracy with the clean training labels: the clamp's model (`start_model` from the
    class means, `fit_targets`, the one schedule) against scikit-learn's linear discriminant
    analysis and logistic regression on the same features (the model's own-task check)."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import LogisticRegression

    z, y = data["z_train"], data["y_train"]
    start = start_model(class_means(z, y, int(y.max()) + 1), config)
    ours = pc.fit_targets(z, y, start, config["steps"], config["lr"])
    test = data["z_test"].numpy(), data["y_test"].numpy()
    lda = LinearDiscriminantAnalysis().fit(z.numpy(), y.numpy())
    logistic = LogisticRegression(max_iter=1000).fit(z.numpy(), y.numpy())
    return {
        "ours": pc.accuracy(ours, data["z_test"], data["y_test"]),
        "lda": float(lda.score(*test)),
        "logistic": float(logistic.score(*test)),
    }


def start_model(means: Tensor, config: dict[str, Any]) -> pc.Model:
    """The start every fitter and rival takes: prototypes at `means`, a uniform prior and, when
    `config["shared_covariance"]`, an identity precision factor to learn."""
    return pc.Model(means, shared_covariance=bool(config.get("shared_covariance", False)))


def without_clamp(
    arm: str,
    z: Tensor,
    supervision: pc.Supervision,
    naive: Tensor,
    start: pc.Model,
    config: dict[str, Any],
) -> pc.Model:
    """The same model trained on the same labels without the partial clamp, the labels taken
    at face value: the labelled rows alone (`semi`), the candidates averaged (`partial`), the
    noisy labels as true (`noisy_*`), the majority vote (`crowd`, ties broken at random)."""
    steps, lr = config["steps"], config["lr"]
    if arm == "semi":
        labelled = naive >= 0
        return pc.fit_targets(z[labelled], naive[labelled], start, steps, lr)
    if arm == "partial":
        mask = supervision.labels.float()
        return pc.fit_targets(z, mask / mask.sum(-1, keepdim=True), start, steps, lr)
    return pc.fit_targets(z, naive, start, steps, lr)


def rivals(
    arm: str,
    z: Tensor,
    supervision: pc.Supervision,
    naive: Tensor,
    start: pc.Model,
    config: dict[str, Any],
    seed: int,
) -> dict[str, Any]:
    """The standard methods for the arm's kind of label, by name: a fitted `Model`, or an
    object with `predict(numpy features)` (cleanlab's)."""
    steps, lr = config["steps"], config["lr"]
    if arm == "semi":
        labelled = naive >= 0
        supervised = pc.fit_targets(z[labelled], naive[labelled], start, steps, lr)
        confidence, guess = supervised.posteriors(z).max(-1)
        keep = labelled | (confidence >= config["pseudo_threshold"])
        pseudo_labels = torch.where(labelled, naive, guess)
        pseudo = pc.fit_targets(z[keep], pseudo_labels[keep], supervised, steps, lr)
        return {"supervised only": supervised, "pseudo-labelling": pseudo}
    if arm == "partial":
        mask = supervision.labels
        average = pc.fit_targets(z, mask.float() / mask.sum(-1, keepdim=True), start, steps, lr)
        epochs = config["proden_epochs"]
        proden = pc.proden(z, mask, start, epochs, max(1, steps // epochs), lr)
        return {"naive average": average, "PRODEN": proden}
    if arm in ("noisy_sym", "noisy_asym"):
        from cleanlab.classification import CleanLearning
        from sklearn.linear_model import LogisticRegression

        noisy = supervision.labels
        clean = CleanLearning(LogisticRegression(max_iter=300), seed=seed, cv_n_folds=3)
        clean.fit(z.numpy(), noisy.numpy())
        return {
            "cross-entropy": pc.fit_targets(z, noisy, start, steps, lr),
            "GCE": pc.generalized_ce(z, noisy, start, steps, lr),
            "cleanlab CleanLearning": clean,
        }
    import pandas as pd
    from crowdkit.aggregation import GLAD, DawidSkene, MajorityVote

    labels = supervision.labels.numpy()
    rows, annotators = np.nonzero(labels >= 0)
    frame = pd.DataFrame({"task": rows, "worker": annotators, "label": labels[rows, annotators]})
    out = {}
    for name, method in (
        ("majority vote", MajorityVote()),
        ("Dawid-Skene", DawidSkene(n_iter=config["crowd_iterations"])),
        ("GLAD", GLAD(n_iter=config["crowd_iterations"])),
    ):
        aggregated = method.fit_predict(frame).sort_index()
        tasks = torch.from_numpy(np.array(aggregated.index, dtype=np.int64))
        target = torch.from_numpy(np.array(aggregated, dtype=np.int64))
        out[name] = pc.fit_targets(z[tasks], target, start, steps, lr)
    return out


def rival_accuracy(model: Any, z: Tensor, y: Tensor) -> float:
    if isinstance(model, pc.Model):
        return pc.accuracy(model, z, y)
    return float((torch.as_tensor(model.predict(z.numpy())) == y).float().mean())

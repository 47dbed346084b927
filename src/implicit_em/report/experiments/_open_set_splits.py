r"""E8's data: a randomized known/outlier/unknown split of the classes, a validation set, and a
far-out-of-distribution set.

Per seed, the classes are permuted at random: the first `known` are the known classes, the next
`outlier` classes are held out for outlier exposure and for validation, the rest are the test
unknowns (near out-of-distribution). The far set is a different data set altogether,
scikit-learn's 8 x 8 digits drawn as 28 x 28 images ([digits_as_images][]).

* training: the known classes' training images, less `n_val` held out;
* validation (choosing the baseline): those `n_val` known images against `n_val` training images
  of the outlier classes;
* outlier exposure: the other training images of the outlier classes;
* test: the test images of the known and of the unknown classes (the outlier classes' test
  images are left out; optionally a random subset of them), and the far set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from implicit_em.report.experiments._neural import Images

__all__ = ["OpenSetSplit", "digits_as_images", "random_split"]


@dataclass(frozen=True)
class OpenSetSplit:
    """One seed's split (see the module docstring); labels are remapped to `0..K-1`.

    Attributes
    ----------
    known, outlier, unknown : tuple of int
        The original class indices of each role.
    x_train, y_train : Tensor
        Known-class training images `[N, D]` and labels `[N]`.
    x_val : Tensor
        Validation images; `val_unknown[i]` says whether row i is an outlier-class image.
    x_outlier : Tensor
        Outlier-exposure images (outlier classes, disjoint from `x_val`).
    x_test, y_test : Tensor
        Test images of the known and the unknown classes; `y_test` is -1 for an unknown.
    x_far : Tensor
        Far out-of-distribution images (another data set).
    x_corrupt : Tensor or None
        The known test images under registered corruptions (E8's second near set), or None
        (`_open_set_corruptions.with_corruptions` sets it).
    """

    known: tuple[int, ...]
    outlier: tuple[int, ...]
    unknown: tuple[int, ...]
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    val_unknown: np.ndarray
    x_outlier: Tensor
    x_test: Tensor
    y_test: Tensor
    x_far: Tensor
    x_corrupt: Tensor | None = None

    @property
    def classes(self) -> int:
        return len(self.known)

    @property
    def test_unknown(self) -> np.ndarray:
        """Whether each test row is an unknown-class image."""
        return (self.y_test < 0).cpu().numpy()


def digits_as_images(mean: Tensor) -> Tensor:
    """scikit-learn's 1,797 digits as 28 x 28 images like MNIST's: pixels in [0, 1], each 8 x 8
    digit resized to 20 x 20 (bilinear) and centred in a 28 x 28 frame, then centred by `mean`
    (the training mean the other images were centred by). `[1797, 784]` on `mean`'s device."""
    from sklearn.datasets import load_digits

    digits = torch.from_numpy(load_digits().images.astype(np.float32) / 16.0)[:, None]
    resized = torch.nn.functional.interpolate(
        digits, size=(20, 20), mode="bilinear", align_corners=False
    )
    framed = torch.nn.functional.pad(resized, (4, 4, 4, 4)).reshape(len(digits), -1)
    return framed.to(mean.device) - mean


def random_split(images: Images, x_far: Tensor, seed: int, config: dict[str, Any]) -> OpenSetSplit:
    """The split of seed `seed`: `config["known"]` known and `config["outlier"]` outlier
    classes drawn at random, `config["n_val"]` validation images per side, and (optional)
    a random `config["n_test"]` of the test images of the known and unknown classes.

    Raises
    ------
    ValueError
        If no class is left unknown, or an outlier class has too few training images for both
        validation and outlier exposure.
    """
    n_classes = len(images.classes)
    n_known, n_outlier, n_val = config["known"], config["outlier"], config["n_val"]
    if n_known + n_outlier >= n_classes:
        raise ValueError(
            f"known ({n_known}) + outlier ({n_outlier}) classes must leave an unknown class of "
            f"{n_classes}"
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_classes)
    known = tuple(int(c) for c in order[:n_known])
    outlier = tuple(int(c) for c in order[n_known : n_known + n_outlier])
    unknown = tuple(int(c) for c in order[n_known + n_outlier :])
    device = images.x_train.device
    remap = torch.full((n_classes,), -1, dtype=torch.long, device=device)
    remap[torch.tensor(known, device=device)] = torch.arange(n_known, device=device)

    y_all = images.y_train.cpu().numpy()
    known_rows = rng.permutation(np.flatnonzero(np.isin(y_all, known)))
    outlier_rows = rng.permutation(np.flatnonzero(np.isin(y_all, outlier)))
    if len(outlier_rows) < 2 * n_val or len(known_rows) <= n_val:
        raise ValueError(f"n_val = {n_val} leaves too few training images for a split")
    val_known, train_rows = known_rows[:n_val], known_rows[n_val:]
    val_outlier, oe_rows = outlier_rows[:n_val], outlier_rows[n_val:]

    def rows(index: np.ndarray) -> Tensor:
        return torch.from_numpy(np.sort(index)).to(device)

    test_rows = np.flatnonzero(~np.isin(images.y_test.cpu().numpy(), outlier))
    n_test = config.get("n_test")
    if n_test is not None and n_test < len(test_rows):
        test_rows = rng.choice(test_rows, size=n_test, replace=False)
    test_rows = rows(test_rows)
    return OpenSetSplit(
        known=known,
        outlier=outlier,
        unknown=unknown,
        x_train=images.x_train[rows(train_rows)],
        y_train=remap[images.y_train[rows(train_rows)]],
        x_val=torch.cat([images.x_train[rows(val_known)], images.x_train[rows(val_outlier)]]),
        val_unknown=np.repeat([False, True], n_val),
        x_outlier=images.x_train[rows(oe_rows)],
        x_test=images.x_test[test_rows],
        y_test=remap[images.y_test[test_rows]],
        x_far=x_far,
    )

r"""Real image data for the neural experiments, read from local files (nothing is downloaded).

* **Fashion-MNIST** (70,000 grey 28 x 28 images, 10 classes) from its four IDX files,
  `train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte` and
  `t10k-labels-idx1-ubyte`, each optionally gzipped (`.gz`). They are looked for in
  `$IMPLICIT_EM_DATA/fashion-mnist`, then `$IMPLICIT_EM_DATA`, then
  `/usr/share/datasets/fashion-mnist` (where Debian's `dataset-fashion-mnist` package puts
  them: `make data` installs it).
* **digits**: scikit-learn's bundled `load_digits` (1,797 grey 8 x 8 images, 10 classes),
  split into train and test with a fixed stratified split.

Both come as an `ImageData`: float32 pixels in $[0, 1]$, one flattened image per row.

The IDX format: a 4-byte magic number (two zero bytes, a type code, the number of dimensions
`n`), then `n` big-endian unsigned 32-bit sizes, then the values in row-major order,
big-endian. `read_idx` reads any IDX file of the types 0x08 (uint8), 0x09 (int8),
0x0B (int16), 0x0C (int32), 0x0D (float32) and 0x0E (float64).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_SYSTEM_DIR",
    "DataNotFoundError",
    "IDXFormatError",
    "ImageData",
    "data_set_files",
    "fashion_mnist_dirs",
    "fashion_mnist_files",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "read_idx",
]

FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's `dataset-fashion-mnist` package installs the files."""

FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

_FASHION_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}

_IDX_TYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"

HOW_TO_GET_FASHION_MNIST = (
    "Install it with `make data` (runs `apt-get update && apt-get install -y "
    "dataset-fashion-mnist` on Debian/Ubuntu, which puts the files in "
    f"{FASHION_MNIST_SYSTEM_DIR}), or copy the four files "
    + ", ".join(f"{name}.gz" for name in _FASHION_FILES.values())
    + " into a folder and set IMPLICIT_EM_DATA to that folder."
)


class IDXFormatError(ValueError):
    """A file is not a well-formed IDX file (the message names the file and what is wrong)."""


class DataNotFoundError(FileNotFoundError):
    """A data set's files are not on this machine (the message says how to get them)."""


@dataclass(frozen=True)
class ImageData:
    """A labelled image data set split into train and test.

    Attributes
    ----------
    name : str
        `"fashion-mnist"` or `"digits"`.
    x_train : numpy.ndarray
        float32 `[N, H*W]`, pixels in $[0, 1]$.
    y_train : numpy.ndarray
        int64 `[N]`, class indices in `[0, len(classes))`.
    x_test : numpy.ndarray
        float32 `[M, H*W]`.
    y_test : numpy.ndarray
        int64 `[M]`.
    classes : tuple of str
        The class names.
    image_shape : tuple of int
        `(H, W)`.
    source : str
        Where the images were read from.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    image_shape: tuple[int, int]
    source: str

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (plain or gzipped) into an array of its stored shape and type.

    Raises `FileNotFoundError` when `path` does not exist and `IDXFormatError` when
    it is not a complete IDX file (bad magic number, unknown type code, truncated data or
    trailing bytes). Multi-byte values are returned in the machine's native byte order.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"IDX file {path} does not exist")
    raw = path.read_bytes()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise IDXFormatError(
                f"{path}: a gzip file that cannot be decompressed ({err})"
            ) from err
    if len(raw) < 4:
        raise IDXFormatError(f"{path}: {len(raw)} bytes, too short for the 4-byte IDX magic number")
    if raw[0] != 0 or raw[1] != 0:
        raise IDXFormatError(
            f"{path}: not an IDX file (its magic number must start with two zero bytes, "
            f"got {raw[:4].hex()})"
        )
    code, ndim = raw[2], raw[3]
    if code not in _IDX_TYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_TYPES)
        raise IDXFormatError(f"{path}: unknown IDX type code 0x{code:02X} (known: {known})")
    if ndim == 0:
        raise IDXFormatError(f"{path}: an IDX file needs at least one dimension, got 0")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IDXFormatError(
            f"{path}: {len(raw)} bytes, too short for the header of {ndim} dimension(s) "
            f"({header} bytes)"
        )
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_TYPES[code]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        problem = "truncated" if len(raw) < expected else "has trailing bytes"
        raise IDXFormatError(
            f"{path}: {problem}: shape {shape} of {dtype.name} needs {expected} bytes, "
            f"the file has {len(raw)}"
        )
    values = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return values.astype(dtype.newbyteorder("="))


def fashion_mnist_dirs() -> list[Path]:
    """The folders searched for Fashion-MNIST, in order."""
    dirs = []
    env = os.environ.get("IMPLICIT_EM_DATA")
    if env:
        dirs += [Path(env) / "fashion-mnist", Path(env)]
    dirs.append(FASHION_MNIST_SYSTEM_DIR)
    return dirs


def _find(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def fashion_mnist_files(root: str | os.PathLike | None = None) -> dict[str, Path]:
    """The four Fashion-MNIST files (`x_train`, `y_train`, `x_test`, `y_test`) in the first
    folder that holds all four: `root`, or those of `fashion_mnist_dirs` when None.

    Raises `DataNotFoundError` (saying how to get the data) when no folder holds them.
    """
    folders = [Path(root)] if root is not None else fashion_mnist_dirs()
    for folder in folders:
        found = {key: _find(folder, stem) for key, stem in _FASHION_FILES.items()}
        paths = {key: p for key, p in found.items() if p is not None}
        if len(paths) == len(_FASHION_FILES):
            return paths
    looked = ", ".join(str(f) for f in folders)
    raise DataNotFoundError(
        f"Fashion-MNIST is not on this machine (looked in {looked}). {HOW_TO_GET_FASHION_MNIST}"
    )


def data_set_files(name: str) -> list[Path]:
    """The files `load_dataset(name)` reads on this machine: Fashion-MNIST's four IDX files
    (none when they are not here), and none for `digits` (bundled with scikit-learn) or any
    other name."""
    if name != "fashion-mnist":
        return []
    try:
        return sorted(fashion_mnist_files().values())
    except DataNotFoundError:
        return []


def load_fashion_mnist(root: str | os.PathLike | None = None) -> ImageData:
    """Fashion-MNIST: 60,000 training and 10,000 test images, 784 pixels in $[0, 1]$.

    Parameters
    ----------
    root : str or os.PathLike, optional
        The folder holding the four IDX files; `None` searches `fashion_mnist_dirs`.

    Returns
    -------
    ImageData
        The training and test splits.

    Raises
    ------
    DataNotFoundError
        When no folder holds all four files (the message says how to get the data).
    IDXFormatError
        When a file is malformed or the files disagree (image and label counts, 28 x 28
        images, labels in 0..9).
    """
    paths = fashion_mnist_files(root)
    folder = paths["x_train"].parent
    arrays = {key: read_idx(p) for key, p in paths.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != (28, 28) or x.dtype != np.uint8:
            raise IDXFormatError(
                f"{paths[f'x_{split}']}: Fashion-MNIST images must be uint8 [N, 28, 28], got "
                f"{x.dtype.name} {tuple(x.shape)}"
            )
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise IDXFormatError(
                f"{paths[f'y_{split}']}: {tuple(y.shape)} labels for {x.shape[0]} images "
                f"(one label per image expected)"
            )
        if y.size and int(y.max()) >= len(FASHION_MNIST_CLASSES):
            raise IDXFormatError(f"{paths[f'y_{split}']}: labels must lie in 0..9, got {y.max()}")
    return ImageData(
        name="fashion-mnist",
        x_train=_pixels(arrays["x_train"], 255.0),
        y_train=arrays["y_train"].astype(np.int64),
        x_test=_pixels(arrays["x_test"], 255.0),
        y_test=arrays["y_test"].astype(np.int64),
        classes=FASHION_MNIST_CLASSES,
        image_shape=(28, 28),
        source=str(folder),
    )


def load_digits(test_fraction: float = 0.25, seed: int = 0) -> ImageData:
    """scikit-learn's bundled 8 x 8 digits (1,797 images), 64 pixels in $[0, 1]$.

    The test set is a stratified `test_fraction` of each class, drawn with `seed`.
    """
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    bunch = sklearn_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        bunch.data,
        bunch.target,
        test_size=test_fraction,
        stratify=bunch.target,
        random_state=seed,
    )
    return ImageData(
        name="digits",
        x_train=_pixels(x_train, 16.0),
        y_train=y_train.astype(np.int64),
        x_test=_pixels(x_test, 16.0),
        y_test=y_test.astype(np.int64),
        classes=tuple(str(c) for c in range(10)),
        image_shape=(8, 8),
        source="sklearn.datasets.load_digits",
    )


def load_dataset(name: str) -> ImageData:
    """`"fashion-mnist"` (`load_fashion_mnist`) or `"digits"` (`load_digits`)."""
    if name == "fashion-mnist":
        return load_fashion_mnist()
    if name == "digits":
        return load_digits()
    raise ValueError(f"data set must be 'fashion-mnist' or 'digits', got {name!r}")


def _pixels(images: np.ndarray, top: float) -> np.ndarray:
    flat = images.reshape(images.shape[0], -1).astype(np.float32)
    return flat / np.float32(top)

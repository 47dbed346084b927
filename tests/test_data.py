"""The IDX reader and the data loaders: files written here, in the IDX format, plain and gzipped."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from implicit_em import data
from implicit_em.data import (
    DataNotFoundError,
    IDXFormatError,
    load_dataset,
    load_digits,
    load_fashion_mnist,
    read_idx,
)

_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding of ``array``, written from the format's definition."""
    header = bytes([0, 0, _CODES[array.dtype], array.ndim])
    header += b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> Path:
    raw = idx_bytes(array)
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(sorted(_CODES, key=str)),
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    compress=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_read_idx_round_trips_every_type(tmp_path_factory, dtype, shape, compress, seed):
    rng = np.random.default_rng(seed)
    array = (rng.integers(0, 100, shape) + rng.random(shape)).astype(dtype)
    path = write_idx(tmp_path_factory.mktemp("idx") / "a.idx", array, compress)
    back = read_idx(path)
    assert back.shape == array.shape
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, array)


def test_read_idx_reads_big_endian_values(tmp_path):
    path = tmp_path / "v.idx"
    path.write_bytes(bytes([0, 0, 0x0B, 1]) + struct.pack(">I", 2) + struct.pack(">hh", 258, -2))
    np.testing.assert_array_equal(read_idx(path), [258, -2])


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x00\x00", "too short"),
        (b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x05", "not an IDX file"),
        (b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x05", "unknown IDX type code 0x07"),
        (b"\x00\x00\x08\x00", "at least one dimension"),
        (b"\x00\x00\x08\x02" + struct.pack(">I", 3), "too short for the header"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 4) + b"\x01\x02", "truncated"),
        (b"\x00\x00\x08\x01" + struct.pack(">I", 1) + b"\x01\x02", "trailing bytes"),
        (b"\x1f\x8b\x08\x00garbage", "cannot be decompressed"),
    ],
)
def test_bad_idx_files_give_clear_errors(tmp_path, raw, message):
    path = tmp_path / "bad.idx"
    path.write_bytes(raw)
    with pytest.raises(IDXFormatError, match=message) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_missing_idx_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_idx(tmp_path / "nothing.idx")


def fake_fashion(
    folder: Path, n_train: int = 6, n_test: int = 4, compress: bool = True, **bad
) -> Path:
    """Four small Fashion-MNIST-shaped IDX files in ``folder`` (``bad`` replaces an array)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": (np.arange(n_train) % 10).astype(np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) % 10).astype(np.uint8),
    }
    for stem, replacement in bad.items():
        arrays[stem.replace("_", "-")] = replacement
    for stem, array in arrays.items():
        write_idx(folder / (stem + (".gz" if compress else "")), array, compress)
    return folder


@pytest.mark.parametrize("compress", [True, False])
def test_load_fashion_mnist_from_a_folder(tmp_path, compress):
    folder = fake_fashion(tmp_path / "fm", compress=compress)
    images = load_fashion_mnist(folder)
    raw = read_idx(folder / ("train-images-idx3-ubyte" + (".gz" if compress else "")))
    assert images.x_train.shape == (6, 784) and images.x_test.shape == (4, 784)
    assert images.x_train.dtype == np.float32
    np.testing.assert_allclose(images.x_train, raw.reshape(6, -1) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(images.y_train, np.arange(6) % 10)
    assert images.y_train.dtype == np.int64
    assert images.classes[9] == "Ankle boot" and images.image_shape == (28, 28)
    assert images.n_features == 784


def test_fashion_mnist_is_found_through_the_environment(tmp_path, monkeypatch):
    fake_fashion(tmp_path / "data" / "fashion-mnist")
    monkeypatch.setenv("IMPLICIT_EM_DATA", str(tmp_path / "data"))
    assert load_fashion_mnist().source == str(tmp_path / "data" / "fashion-mnist")
    monkeypatch.setenv("IMPLICIT_EM_DATA", str(tmp_path / "data" / "fashion-mnist"))
    assert data.fashion_mnist_dirs()[1] == tmp_path / "data" / "fashion-mnist"
    assert load_fashion_mnist().n_features == 784


def test_missing_fashion_mnist_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("IMPLICIT_EM_DATA", str(tmp_path / "empty"))
    monkeypatch.setattr(data, "FASHION_MNIST_SYSTEM_DIR", tmp_path / "not-installed")
    with pytest.raises(DataNotFoundError) as info:
        load_fashion_mnist()
    message = str(info.value)
    assert "make data" in message and "apt-get install -y dataset-fashion-mnist" in message
    assert "IMPLICIT_EM_DATA" in message and str(tmp_path / "not-installed") in message
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"train_labels_idx1_ubyte": np.zeros(5, np.uint8)}, "one label per image"),
        ({"t10k_images_idx3_ubyte": np.zeros((4, 8, 8), np.uint8)}, r"uint8 \[N, 28, 28\]"),
        ({"t10k_labels_idx1_ubyte": np.array([0, 1, 2, 10], np.uint8)}, "labels must lie in 0..9"),
    ],
)
def test_inconsistent_fashion_files_are_rejected(tmp_path, bad, message):
    folder = fake_fashion(tmp_path / "fm", **bad)
    with pytest.raises(IDXFormatError, match=message):
        load_fashion_mnist(folder)


def test_load_digits_split():
    images = load_digits()
    assert images.x_train.shape == (1347, 64) and images.x_test.shape == (450, 64)
    assert images.x_train.min() >= 0.0 and images.x_train.max() == 1.0
    test = np.bincount(images.y_test, minlength=10)
    total = test + np.bincount(images.y_train, minlength=10)
    assert np.abs(test - 0.25 * total).max() <= 1  # stratified: a quarter of each class
    np.testing.assert_array_equal(load_digits().y_train, images.y_train)  # fixed split
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.0)


def test_load_dataset_names():
    assert load_dataset("digits").name == "digits"
    with pytest.raises(ValueError, match="'fashion-mnist' or 'digits'"):
        load_dataset("mnist")

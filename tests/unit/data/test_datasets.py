"""Tests of load_dataset: the registry and options, synthetic blobs, the real offline datasets in
``../shared/data`` (skipped when absent), the embedded UCI HAR copy, and corrupt / missing files."""

from __future__ import annotations

import gzip
import hashlib
import logging
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fedaug.data.datasets import (
    Dataset,
    available_datasets,
    dataset_options,
    load_dataset,
    resolve_data_dir,
)
from fedaug.data.sources import mnist
from fedaug.data.sources.cifar10_jpeg import decode_jpeg_archive
from fedaug.errors import ConfigError, DatasetError, RegistryError
from tests.conftest import SHARED_DATA
from tests.unit.data.helpers import idx_bytes

HAR_TRAIN_COUNTS = [1226, 1073, 986, 1286, 1374, 1407]
HAR_TEST_COUNTS = [496, 471, 420, 491, 532, 537]
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("processed")


# ---- registry, options, data dir ------------------------------------------------------------------------


def test_all_loaders_are_registered() -> None:
    names = ["arrays", "cifar10", "cifar100", "csv", "fashion_mnist", "fsdd", "image_folder", "mnist"]
    names += ["synthetic", "uci_har", "urbansound8k"]
    assert available_datasets() == names
    assert dataset_options("uci_har") == {"channels": 3, "normalize": False}


def test_unknown_option_names_the_valid_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown option\(s\) 'chanels'.*valid options: channels, normalize"
    ):
        load_dataset("uci_har", chanels=9)


def test_unknown_dataset_lists_the_valid_ones() -> None:
    with pytest.raises(RegistryError, match="valid choices: arrays, cifar10, cifar100, csv, fashion_mnist"):
        load_dataset("imagenet")


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("uci_har", {"channels": 4}, "option 'channels' of dataset 'uci_har' must be one of 3, 9, got 4"),
        ("uci_har", {"normalize": "yes"}, "must be true or false"),
        ("cifar10", {"variant": "jpeg"}, "must be one of official, jpeg_lossy, got 'jpeg'"),
        ("cifar100", {"labels": "superclass"}, "must be one of fine, coarse, got 'superclass'"),
        ("urbansound8k", {"split": "random"}, "must be one of folds, paper, got 'random'"),
        ("urbansound8k", {"test_fold": 11}, "test_fold"),
        ("fsdd", {"n_mels": 0}, "option 'n_mels' of dataset 'fsdd' must be >= 1, got 0"),
        ("fsdd", {"duration_ms": 10}, "too short for n_fft=512"),
        ("synthetic", {"shape": [1, 0]}, "'shape'"),
        ("synthetic", {"num_classes": 1}, "num_classes"),
    ],
)
def test_bad_option_values_raise_config_error(name: str, options: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        load_dataset(name, data_dir=tmp_path, cache_dir=tmp_path, **options)


def test_data_dir_resolution_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FEDAUG_DATA", raising=False)
    assert resolve_data_dir()[0] == Path("~/.cache/fedaug/data").expanduser()
    monkeypatch.setenv("FEDAUG_DATA", str(tmp_path / "env"))
    assert resolve_data_dir() == (tmp_path / "env", "$FEDAUG_DATA")
    assert resolve_data_dir(tmp_path / "arg")[0] == tmp_path / "arg"


def test_missing_dataset_error_lists_files_places_and_fixes(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", data_dir=tmp_path)
    message = str(info.value)
    for expected in (
        "train-images-idx3-ubyte.gz",
        str(tmp_path / "mnist"),
        "--data-dir",
        "FEDAUG_DATA",
        "download=True",
    ):
        assert expected in message


def test_dataset_checks_its_tensors() -> None:
    x = torch.zeros(2, 3)
    with pytest.raises(DatasetError, match="float32 x / int64 y"):
        Dataset(
            "d",
            x,
            torch.zeros(2, dtype=torch.int32),
            x,
            torch.zeros(2, dtype=torch.int64),
            2,
            ["a", "b"],
            (3,),
            "",
        )
    with pytest.raises(DatasetError, match="labels outside"):
        Dataset("d", x, torch.tensor([0, 5]), x, torch.tensor([0, 1]), 2, ["a", "b"], (3,), "")
    y = torch.tensor([0, 1])
    with pytest.raises(DatasetError, match=r"d: modality must be one of image, signal, audio, got 'video'"):
        Dataset("d", x, y, x, y, 2, ["a", "b"], (3,), "", modality="video")


# ---- synthetic ------------------------------------------------------------------------------------------


def test_synthetic_is_deterministic_and_balanced() -> None:
    first = load_dataset("synthetic", seed=3)
    second = load_dataset("synthetic", seed=3)
    other = load_dataset("synthetic", seed=4)
    assert torch.equal(first.x_train, second.x_train) and torch.equal(first.y_test, second.y_test)
    assert not torch.equal(first.x_train, other.x_train)
    assert first.x_train.shape == (600, 1, 8, 8) and first.x_test.shape == (200, 1, 8, 8)
    assert torch.bincount(first.y_train).tolist() == [60] * 10
    assert first.mean is None and first.input_shape == (1, 8, 8)


def test_synthetic_custom_shape_and_separation() -> None:
    data = load_dataset("synthetic", shape=[20], num_classes=3, num_train=30, num_test=9, separation=50.0)
    assert data.x_train.shape == (30, 20) and data.num_classes == 3
    centroids = torch.stack([data.x_train[data.y_train == c].mean(0) for c in range(3)])
    nearest = torch.cdist(data.x_test, centroids).argmin(1)
    assert torch.equal(nearest, data.y_test)  # far-apart blobs are trivially separable


# ---- real offline data ----------------------------------------------------------------------------------


def test_uci_har_real(shared_data: Path) -> None:
    data = load_dataset("uci_har", data_dir=shared_data)
    assert (data.num_train, data.num_test, data.input_shape) == (7352, 2947, (1, 128, 3))
    assert torch.bincount(data.y_train).tolist() == HAR_TRAIN_COUNTS
    assert torch.bincount(data.y_test).tolist() == HAR_TEST_COUNTS
    assert data.class_names[0] == "WALKING" and data.class_names[5] == "LAYING"
    assert data.mean is None and "uci_har_inertial.npz" in data.source
    train_subjects = set(data.extras["subject_train"].tolist())
    assert not train_subjects & set(data.extras["subject_test"].tolist())


def test_uci_har_nine_channels_normalized(shared_data: Path) -> None:
    data = load_dataset("uci_har", data_dir=shared_data, channels=9, normalize=True)
    assert data.x_train.shape == (7352, 1, 128, 9)
    flat = data.x_train.reshape(-1, 9)
    torch.testing.assert_close(flat.mean(dim=0), torch.zeros(9), atol=1e-4, rtol=0)
    torch.testing.assert_close(flat.std(dim=0), torch.ones(9), atol=1e-3, rtol=0)
    assert data.std is not None and data.std[0] == pytest.approx(0.1948, abs=1e-4)
    raw = load_dataset("uci_har", data_dir=shared_data, channels=9)
    torch.testing.assert_close(data.denormalize(data.x_test[:5]), raw.x_test[:5], atol=1e-5, rtol=0)


def test_uci_har_embedded_works_without_any_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDAUG_DATA", str(tmp_path))
    data = load_dataset("uci_har")
    assert "embedded" in data.source
    assert (data.num_train, data.num_test) == (7352, 2947)
    assert data.modality == "signal"  # fedaugmix's image operations refuse it
    assert torch.bincount(data.y_train).tolist() == HAR_TRAIN_COUNTS
    if SHARED_DATA.is_dir():
        shared = load_dataset("uci_har", data_dir=SHARED_DATA)
        assert torch.equal(shared.x_train, data.x_train)


def test_mnist_real(shared_data: Path) -> None:
    data = load_dataset("mnist", data_dir=shared_data)
    assert (data.num_train, data.num_test, data.input_shape) == (60000, 10000, (1, 28, 28))
    assert torch.bincount(data.y_train).tolist() == MNIST_TRAIN_COUNTS
    assert data.mean == (0.1307,) and data.std == (0.3081,)
    assert abs(float(data.x_train.mean())) < 0.01 and abs(float(data.x_train.std()) - 1) < 0.01
    pixels = data.denormalize(data.x_test[:10])
    assert float(pixels.min()) > -1e-5 and float(pixels.max()) < 1 + 1e-5


def test_fashion_mnist_real(shared_data: Path) -> None:
    data = load_dataset("fashion_mnist", data_dir=shared_data, normalize=False)
    assert (data.num_train, data.num_test) == (60000, 10000)
    assert torch.bincount(data.y_train).tolist() == [6000] * 10
    assert torch.bincount(data.y_test).tolist() == [1000] * 10
    assert data.mean is None and float(data.x_train.min()) >= 0.0 and float(data.x_train.max()) <= 1.0
    assert float(data.x_train.mean()) == pytest.approx(0.2860, abs=0.005)
    assert data.class_names[9] == "Ankle boot"


def test_urbansound8k_mfcc40_real(shared_data: Path) -> None:
    folds = load_dataset("urbansound8k", data_dir=shared_data, variant="mfcc40")
    assert folds.num_train + folds.num_test == 8732 and folds.input_shape == (40,)
    assert set(folds.extras["fold_test"].tolist()) == {10} and 10 not in folds.extras["fold_train"].tolist()
    assert folds.class_names[0] == "air_conditioner" and folds.mean is not None and len(folds.mean) == 40
    torch.testing.assert_close(folds.x_train.mean(0), torch.zeros(40), atol=1e-3, rtol=0)
    paper = load_dataset("urbansound8k", data_dir=shared_data, variant="mfcc40", split="paper")
    assert (paper.num_train, paper.num_test) == (6986, 1746)
    fold1 = load_dataset("urbansound8k", data_dir=shared_data, variant="mfcc40", test_fold=1)
    assert set(fold1.extras["fold_test"].tolist()) == {1}


def test_urbansound8k_audio_missing_suggests_mfcc40(shared_data: Path) -> None:
    if (shared_data / "urbansound8k").exists():
        pytest.skip("real UrbanSound8K audio is present")
    with pytest.raises(DatasetError, match="variant='mfcc40'") as info:
        load_dataset("urbansound8k", data_dir=shared_data)
    assert "UrbanSound8K/metadata/UrbanSound8K.csv" in str(info.value)


def test_cifar10_official_missing_suggests_jpeg_variant(shared_data: Path) -> None:
    if (shared_data / "cifar10").exists():
        pytest.skip("official CIFAR-10 is present")
    with pytest.raises(DatasetError, match="variant='jpeg_lossy'") as info:
        load_dataset("cifar10", data_dir=shared_data)
    assert "cifar-10-python.tar.gz" in str(info.value)


def test_cifar10_jpeg_archive_first_images(shared_data: Path) -> None:
    archive = next((shared_data / "cifar10_jpeg_lossy").glob("CIFAR-10-images_*.tar.gz"))
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    arrays = decode_jpeg_archive(archive, classes, limit=40)
    count = len(arrays["y_train"]) + len(arrays["y_test"])
    assert count == 40
    x = np.concatenate([arrays["x_train"], arrays["x_test"]])
    assert x.shape == (40, 32, 32, 3) and x.dtype == np.uint8 and x.std() > 10


@pytest.mark.slow
def test_cifar10_jpeg_full(shared_data: Path, cache_dir: Path) -> None:
    data = load_dataset("cifar10", data_dir=shared_data, cache_dir=cache_dir, variant="jpeg_lossy")
    assert (data.num_train, data.num_test, data.input_shape) == (50000, 10000, (3, 32, 32))
    assert torch.bincount(data.y_train).tolist() == [5000] * 10
    assert torch.bincount(data.y_test).tolist() == [1000] * 10
    assert "LOSSY" in data.source and "NOT comparable" in data.source


@pytest.mark.slow
def test_fsdd_full(shared_data: Path, cache_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        data = load_dataset("fsdd", data_dir=shared_data, cache_dir=cache_dir)
    assert "differ from revision" not in caplog.text  # the pinned revision's recordings digest matches
    assert (data.num_train, data.num_test, data.input_shape) == (2700, 300, (2, 64, 63))
    assert torch.bincount(data.y_train).tolist() == [270] * 10
    assert torch.bincount(data.y_test).tolist() == [30] * 10
    assert torch.isfinite(data.x_train).all()
    cached = load_dataset("fsdd", data_dir=shared_data, cache_dir=cache_dir)
    assert torch.equal(cached.x_test, data.x_test)


# ---- corrupt files --------------------------------------------------------------------------------------


def _write_mnist(folder: Path, num_train: int = 6, num_test: int = 4) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", num_train), ("t10k", num_test)):
        images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) % 10).astype(np.uint8)
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(idx_bytes(2051, (count, 28, 28), images.tobytes()))
        )
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(idx_bytes(2049, (count,), labels.tobytes()))
        )


def test_mnist_small_idx_files_load(tmp_path: Path) -> None:
    _write_mnist(tmp_path / "mnist")
    data = load_dataset("mnist", data_dir=tmp_path, normalize=False)
    assert data.x_train.shape == (6, 1, 28, 28) and data.y_test.tolist() == [0, 1, 2, 3]


def test_truncated_gz_is_a_dataset_error_naming_the_file(tmp_path: Path) -> None:
    _write_mnist(tmp_path / "mnist")
    victim = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(DatasetError, match="truncated or corrupt gzip") as info:
        load_dataset("mnist", data_dir=tmp_path)
    assert str(victim) in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (idx_bytes(2049, (6, 28, 28), bytes(6 * 784)), "magic number 2049, expected 2051"),
        (idx_bytes(2051, (6, 28, 28), bytes(100)), "expected 4720"),
        (b"\x00\x00", "truncated"),
    ],
)
def test_bad_idx_content_is_a_dataset_error(tmp_path: Path, content: bytes, message: str) -> None:
    _write_mnist(tmp_path / "fashion_mnist")
    (tmp_path / "fashion_mnist" / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(content))
    with pytest.raises(DatasetError, match=message):
        load_dataset("fashion_mnist", data_dir=tmp_path)


def test_image_label_count_mismatch(tmp_path: Path) -> None:
    _write_mnist(tmp_path / "mnist")
    labels = idx_bytes(2049, (3,), bytes(3))
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels))
    with pytest.raises(DatasetError, match=r"4 images but .* 3 labels"):
        load_dataset("mnist", data_dir=tmp_path)


def test_cifar10_batch_with_wrong_md5_is_a_dataset_error(tmp_path: Path) -> None:
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in (
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
    ):
        (folder / name).write_bytes(b"not a pickle")
    with pytest.raises(DatasetError, match=r"checksum mismatch for CIFAR-10 batch .*data_batch_1"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_cifar10_official_archive_with_wrong_md5(tmp_path: Path) -> None:
    (tmp_path / "cifar10").mkdir()
    archive = tmp_path / "cifar10" / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz"):
        pass
    with pytest.raises(DatasetError, match="c58f30108f718f92721af3b95e74349a"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_uci_har_corrupt_npz(tmp_path: Path) -> None:
    (tmp_path / "uci_har").mkdir()
    (tmp_path / "uci_har" / "uci_har_inertial.npz").write_bytes(b"PK\x03\x04 broken")
    with pytest.raises(DatasetError, match=r"uci_har_inertial\.npz"):
        load_dataset("uci_har", data_dir=tmp_path)


def test_fsdd_corrupt_archive(tmp_path: Path) -> None:
    (tmp_path / "fsdd").mkdir()
    source = SHARED_DATA / "fsdd" / "fsdd_recordings_26eb9aa.tar.xz"
    if source.exists():
        (tmp_path / "fsdd" / "fsdd.tar.xz").write_bytes(source.read_bytes()[:200_000])
    else:
        (tmp_path / "fsdd" / "fsdd.tar.xz").write_bytes(b"\xfd7zXZ\x00 truncated")
    with pytest.raises(DatasetError, match=r"fsdd\.tar\.xz"):
        load_dataset("fsdd", data_dir=tmp_path, cache_dir=tmp_path / "cache")


def test_mnist_download_from_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_mnist(tmp_path / "mirror")
    md5s = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in (tmp_path / "mirror").iterdir()}
    monkeypatch.setattr(
        mnist, "MNIST_MIRRORS", (f"file://{tmp_path}/missing/", f"{(tmp_path / 'mirror').as_uri()}/")
    )
    monkeypatch.setattr(mnist, "MNIST_MD5", md5s)
    with pytest.raises(DatasetError, match="download=True"):
        load_dataset("mnist", data_dir=tmp_path / "data")
    data = load_dataset("mnist", data_dir=tmp_path / "data", download=True)
    assert data.num_train == 6 and (tmp_path / "data" / "mnist" / "train-images-idx3-ubyte.gz").exists()

"""End-to-end loader tests on small hand-made copies of each source format: the original UCI HAR text layout
(folder, zip, nested zip), FSDD recordings (a few real files, folder and archive), an UrbanSound8K audio
layout, a CIFAR-10 JPEG archive (with its cache), and the CIFAR-10 / CIFAR-100 python pickles."""

from __future__ import annotations

import hashlib
import io
import pickle
import shutil
import tarfile
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedaug.data.datasets import load_dataset
from fedaug.data.download import RemoteFile
from fedaug.data.sources import cifar10, cifar100, fsdd, uci_har
from fedaug.data.sources.fsdd import iter_recordings
from fedaug.data.sources.uci_har import CHANNEL_NAMES
from fedaug.errors import DatasetError
from tests.conftest import SHARED_DATA

US8K_CLASSES = [
    "air_conditioner", "car_horn", "children_playing", "dog_bark", "drilling",
    "engine_idling", "gun_shot", "jackhammer", "siren", "street_music",
]  # fmt: skip


# ---- UCI HAR original layout ----------------------------------------------------------------------------


def _uci_files(num_train: int = 4, num_test: int = 3) -> tuple[dict[str, bytes], np.ndarray]:
    """Relative path -> bytes of a tiny original-layout copy, and the expected train signals."""
    rng = np.random.default_rng(0)
    files: dict[str, bytes] = {}
    expected = None
    for split, count, first_subject in (("train", num_train, 1), ("test", num_test, 2)):
        signals = rng.standard_normal((count, 128, 9)).astype(np.float32)
        expected = signals if split == "train" else expected
        for c, name in enumerate(CHANNEL_NAMES):
            text = "\n".join(" ".join(f"{v:.7e}" for v in row) for row in signals[:, :, c])
            files[f"{split}/Inertial Signals/{name}_{split}.txt"] = text.encode()
        files[f"{split}/y_{split}.txt"] = "\n".join(str(i % 6 + 1) for i in range(count)).encode()
        files[f"{split}/subject_{split}.txt"] = "\n".join([str(first_subject)] * count).encode()
    assert expected is not None
    return files, expected


def _zip(files: dict[str, bytes], prefix: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for rel, data in files.items():
            zf.writestr(prefix + rel, data)
    return buffer.getvalue()


@pytest.mark.parametrize("layout", ["folder", "zip", "nested_zip"])
def test_uci_har_original_layout(tmp_path: Path, layout: str) -> None:
    # Prepare
    files, expected = _uci_files()
    root = tmp_path / "uci_har"
    root.mkdir()
    if layout == "folder":
        for rel, data in files.items():
            (root / "UCI HAR Dataset" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "UCI HAR Dataset" / rel).write_bytes(data)
    elif layout == "zip":
        (root / "UCI HAR Dataset.zip").write_bytes(_zip(files, "UCI HAR Dataset/"))
    else:
        inner = _zip(files, "UCI HAR Dataset/")
        (root / "har.zip").write_bytes(_zip({"UCI HAR Dataset.zip": inner}, ""))
    # Execute
    data = load_dataset("uci_har", data_dir=tmp_path, cache_dir=tmp_path / "cache", channels=9)
    # Assert
    assert (data.num_train, data.num_test) == (4, 3)
    assert data.y_train.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(data.x_train[:, 0].numpy(), expected, rtol=1e-6)
    assert data.extras["subject_test"].tolist() == [2, 2, 2]


def test_uci_har_broken_original_layout(tmp_path: Path) -> None:
    files, _ = _uci_files()
    del files["test/y_test.txt"]
    (tmp_path / "uci_har").mkdir()
    (tmp_path / "uci_har" / "UCI HAR Dataset.zip").write_bytes(_zip(files, "UCI HAR Dataset/"))
    with pytest.raises(Exception, match="cannot read the original UCI HAR layout"):
        load_dataset("uci_har", data_dir=tmp_path, cache_dir=tmp_path / "cache")


# ---- FSDD -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fsdd_subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir whose fsdd/recordings holds the first 40 real recordings."""
    archive = SHARED_DATA / "fsdd" / "fsdd_recordings_26eb9aa.tar.xz"
    if not archive.exists():
        pytest.skip(f"FSDD archive not found at {archive}")
    root = tmp_path_factory.mktemp("fsdd_data")
    (root / "fsdd" / "recordings").mkdir(parents=True)
    for count, (name, data) in enumerate(iter_recordings(archive)):
        if count == 40:
            break
        (root / "fsdd" / "recordings" / name).write_bytes(data)
    return root


def test_fsdd_subset_shapes_and_split(fsdd_subset: Path, tmp_path: Path) -> None:
    data = load_dataset("fsdd", data_dir=fsdd_subset, cache_dir=tmp_path)
    names = sorted(p.name for p in (fsdd_subset / "fsdd" / "recordings").glob("*.wav"))
    num_test = sum(int(n.removesuffix(".wav").split("_")[2]) < 5 for n in names)
    assert (data.num_train, data.num_test) == (40 - num_test, num_test)
    assert data.input_shape == (2, 64, 63) and data.x_train.dtype == torch.float32
    assert data.modality == "audio"
    assert torch.equal(data.x_train[:, 0], data.x_train[:, 1])  # mono duplicated
    peak = data.x_train.amax(dim=(1, 2, 3))
    assert torch.all(data.x_train.amin(dim=(1, 2, 3)) >= peak - 80.0 - 1e-3)  # top_db = 80


def test_fsdd_archive_matches_folder_and_options(fsdd_subset: Path, tmp_path: Path) -> None:
    (tmp_path / "fsdd").mkdir()
    with tarfile.open(tmp_path / "fsdd" / "subset.tar.gz", "w:gz") as tf:
        tf.add(fsdd_subset / "fsdd" / "recordings", arcname="free-spoken-digit-dataset/recordings")
    from_archive = load_dataset("fsdd", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    from_folder = load_dataset("fsdd", data_dir=fsdd_subset, cache_dir=tmp_path / "cache")
    assert torch.equal(from_archive.x_test, from_folder.x_test)
    small = load_dataset("fsdd", data_dir=fsdd_subset, cache_dir=tmp_path / "cache", channels=1, n_mels=32)
    assert small.input_shape == (1, 32, 63)


# ---- UrbanSound8K audio layout --------------------------------------------------------------------------


def _write_wav(path: Path, rate: int, channels: int, seconds: float, freq: float) -> None:
    t = np.arange(int(rate * seconds)) / rate
    tone = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2")
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(channels)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(np.repeat(tone[:, None], channels, axis=1).tobytes())


def test_urbansound8k_audio_layout(tmp_path: Path) -> None:
    # Prepare: one short clip per class, class c in fold c + 1, mixed rates and channel counts
    root = tmp_path / "urbansound8k" / "UrbanSound8K"
    rows = ["slice_file_name,fsID,start,end,salience,fold,classID,class"]
    for c, name in enumerate(US8K_CLASSES):
        rate, channels = (22050, 1) if c % 2 else (48000, 2)
        _write_wav(
            root / "audio" / f"fold{c + 1}" / f"{c}-{c}-0-0.wav",
            rate,
            channels,
            0.5 + c * 0.5,
            300.0 + 100 * c,
        )
        rows.append(f"{c}-{c}-0-0.wav,{c},0,1,1,{c + 1},{c},{name}")
    (root / "metadata").mkdir()
    (root / "metadata" / "UrbanSound8K.csv").write_text("\n".join(rows) + "\n")
    # Execute
    data = load_dataset("urbansound8k", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    # Assert: the paper's [2, 64, 344], fold 10 is the test set
    assert data.input_shape == (2, 64, 344)
    assert (data.num_train, data.num_test) == (9, 1) and data.y_test.tolist() == [9]
    assert data.class_names == US8K_CLASSES and data.mean is None
    assert torch.isfinite(data.x_train).all()
    paper = load_dataset(
        "urbansound8k", data_dir=tmp_path, cache_dir=tmp_path / "cache", split="paper", seed=0
    )
    assert (paper.num_train, paper.num_test) == (8, 2)


# ---- CIFAR-10 JPEG archive ------------------------------------------------------------------------------


def test_cifar10_jpeg_variant_from_small_archive(tmp_path: Path) -> None:
    # Prepare: flat-colour JPEGs, 2 train + 1 test image for "airplane" and "truck"
    folder = tmp_path / "cifar10_jpeg_lossy"
    folder.mkdir()
    colours = {"airplane": (200, 30, 30), "truck": (20, 40, 220)}
    with tarfile.open(folder / "CIFAR-10-images_test.tar.gz", "w:gz") as tf:
        for split, count in (("train", 2), ("test", 1)):
            for cls, colour in colours.items():
                for i in range(count):
                    buffer = io.BytesIO()
                    Image.new("RGB", (32, 32), colour).save(buffer, format="JPEG", quality=75)
                    info = tarfile.TarInfo(f"CIFAR-10-images/{split}/{cls}/{i:04d}.jpg")
                    info.size = len(buffer.getvalue())
                    tf.addfile(info, io.BytesIO(buffer.getvalue()))
    # Execute
    data = load_dataset("cifar10", data_dir=tmp_path, cache_dir=tmp_path / "cache", variant="jpeg_lossy")
    # Assert
    assert data.x_train.shape == (4, 3, 32, 32) and data.y_train.tolist() == [0, 0, 9, 9]
    assert "LOSSY" in data.source
    pixels = data.denormalize(data.x_test) * 255
    torch.testing.assert_close(pixels[1, :, 16, 16], torch.tensor([20.0, 40.0, 220.0]), atol=6, rtol=0)
    assert len(list((tmp_path / "cache" / "cifar10_jpeg_lossy").iterdir())) == 1
    again = load_dataset("cifar10", data_dir=tmp_path, cache_dir=tmp_path / "cache", variant="jpeg_lossy")
    assert torch.equal(again.x_train, data.x_train)


# ---- CIFAR-10 official batches (md5s patched to match hand-made batches) --------------------------------


def _fake_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    batches, md5s = {}, {}
    for name in cifar10.BATCH_MD5:
        content = {b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), b"labels": [0, 5, 9]}
        batches[name] = pickle.dumps(content)
        md5s[name] = hashlib.md5(batches[name]).hexdigest()
    monkeypatch.setattr(cifar10, "BATCH_MD5", md5s)
    return batches


def _pack(root: Path, folder: str, archive: str) -> RemoteFile:
    """Replaces ``root/folder`` by ``root/archive`` (tar.gz) and returns it as a RemoteFile with its md5."""
    with tarfile.open(root / archive, "w:gz") as tf:
        tf.add(root / folder, arcname=folder)
    shutil.rmtree(root / folder)
    return RemoteFile(archive, (), hashlib.md5((root / archive).read_bytes()).hexdigest())


@pytest.mark.parametrize("layout", ["folder", "archive"])
def test_cifar10_official_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    # Prepare
    batches = _fake_batches(tmp_path, monkeypatch)
    root = tmp_path / "cifar10"
    (root / "cifar-10-batches-py").mkdir(parents=True)
    for name, data in batches.items():
        (root / "cifar-10-batches-py" / name).write_bytes(data)
    if layout == "archive":
        monkeypatch.setattr(cifar10, "ARCHIVE", _pack(root, "cifar-10-batches-py", "cifar-10-python.tar.gz"))
    # Execute
    data = load_dataset("cifar10", data_dir=tmp_path, normalize=False)
    # Assert
    assert data.x_train.shape == (15, 3, 32, 32) and data.x_test.shape == (3, 3, 32, 32)
    assert data.y_test.tolist() == [0, 5, 9] and "md5-verified" in data.source
    first = pickle.loads(batches["data_batch_1"])[b"data"][0].reshape(3, 32, 32)
    torch.testing.assert_close(data.x_train[0] * 255, torch.from_numpy(first).float())


# ---- CIFAR-100 python release (md5s patched to match hand-made pickles) ----------------------------------


def _fake_cifar100(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[bytes, object]]:
    rng = np.random.default_rng(1)
    contents: dict[str, dict[bytes, object]] = {
        "train": {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"fine_labels": [0, 99, 7, 7]},
        "test": {b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), b"fine_labels": [3, 98]},
        "meta": {
            b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
        },
    }
    contents["train"][b"coarse_labels"] = [0, 19, 2, 2]
    contents["test"][b"coarse_labels"] = [1, 18]
    (root / "cifar-100-python").mkdir(parents=True)
    md5s = {}
    for name, content in contents.items():
        data = pickle.dumps(content)
        (root / "cifar-100-python" / name).write_bytes(data)
        md5s[name] = hashlib.md5(data).hexdigest()
    monkeypatch.setattr(cifar100, "FILE_MD5", md5s)
    return contents


@pytest.mark.parametrize("layout", ["folder", "archive"])
def test_cifar100_fine_and_coarse_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    # Prepare
    root = tmp_path / "cifar100"
    contents = _fake_cifar100(root, monkeypatch)
    if layout == "archive":
        monkeypatch.setattr(cifar100, "ARCHIVE", _pack(root, "cifar-100-python", "cifar-100-python.tar.gz"))
    # Execute
    fine = load_dataset("cifar100", data_dir=tmp_path, normalize=False)
    coarse = load_dataset("cifar100", data_dir=tmp_path, labels="coarse")
    # Assert: shapes, both label sets, names from meta, pixels in channel-major order, normalisation
    assert fine.x_train.shape == (4, 3, 32, 32) and fine.x_test.shape == (2, 3, 32, 32)
    assert fine.num_classes == 100 and fine.class_names[99] == "fine99"
    assert fine.y_train.tolist() == [0, 99, 7, 7] and fine.y_test.tolist() == [3, 98]
    assert coarse.num_classes == 20 and coarse.class_names[19] == "coarse19"
    assert coarse.y_train.tolist() == [0, 19, 2, 2] and coarse.y_test.tolist() == [1, 18]
    assert "md5-verified" in fine.source and "coarse labels" in coarse.source
    train = contents["train"][b"data"]
    assert isinstance(train, np.ndarray)
    first = torch.from_numpy(train[0].reshape(3, 32, 32)).float()
    torch.testing.assert_close(fine.x_train[0] * 255, first)
    mean, std = torch.tensor(cifar100.CIFAR100_MEAN), torch.tensor(cifar100.CIFAR100_STD)
    torch.testing.assert_close(coarse.x_train[0], (first / 255 - mean.view(3, 1, 1)) / std.view(3, 1, 1))


def test_cifar100_tampered_file_is_refused_before_unpickling(tmp_path: Path) -> None:
    folder = tmp_path / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    for name in ("train", "test", "meta"):
        (folder / name).write_bytes(b"not a pickle")
    with pytest.raises(
        DatasetError, match=r"checksum mismatch for CIFAR-100 file .*train: expected md5 16019d7e"
    ):
        load_dataset("cifar100", data_dir=tmp_path)


def test_cifar100_missing_names_the_layout_and_download(tmp_path: Path) -> None:
    expected = r"cifar-100-python/\{train, test, meta\}.*--set data.download=true"
    with pytest.raises(DatasetError, match=expected):
        load_dataset("cifar100", data_dir=tmp_path)


# ---- download=True through file:// URLs (no network) ---------------------------------------------------


def test_uci_har_download_is_checked_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files, _ = _uci_files()
    archive = tmp_path / "remote" / "har.zip"
    archive.parent.mkdir()
    archive.write_bytes(_zip(files, "UCI HAR Dataset/"))
    monkeypatch.setattr(uci_har, "OFFICIAL_URL", archive.as_uri())
    data = load_dataset("uci_har", data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", download=True)
    assert data.num_train == 4 and "official zip" in data.source
    del files["train/y_train.txt"]
    archive.write_bytes(_zip(files, "UCI HAR Dataset/"))
    with pytest.raises(DatasetError, match="cannot read the original UCI HAR layout"):
        load_dataset("uci_har", data_dir=tmp_path / "data2", cache_dir=tmp_path / "cache", download=True)
    assert not list((tmp_path / "data2" / "uci_har").iterdir())


def test_fsdd_download_is_checked_by_recordings_digest(
    fsdd_subset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "remote.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(fsdd_subset / "fsdd" / "recordings", arcname="fsdd-x/recordings")
    monkeypatch.setattr(fsdd, "FSDD_URL", archive.as_uri())
    with pytest.raises(DatasetError, match="recordings digest"):
        load_dataset("fsdd", data_dir=tmp_path / "bad", cache_dir=tmp_path / "cache", download=True)
    digest = fsdd.recordings_digest(fsdd.read_recordings(archive))
    monkeypatch.setattr(fsdd, "RECORDINGS_SHA256", digest)
    data = load_dataset("fsdd", data_dir=tmp_path / "good", cache_dir=tmp_path / "cache", download=True)
    assert data.num_train + data.num_test == 40

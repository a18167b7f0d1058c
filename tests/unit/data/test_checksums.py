"""Local dataset files are verified against the official checksums (once per file version, cached by path,
size and mtime): small fake files with patched official digests and sizes; nothing is downloaded."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from fedaug.cli.main import main
from fedaug.data import checksums
from fedaug.data.datasets import load_dataset
from fedaug.data.download import RemoteFile
from fedaug.data.sources import cifar100, fashion_mnist, mnist
from fedaug.errors import DatasetError
from tests.conftest import SHARED_DATA, SMOKE
from tests.unit.data.helpers import idx_bytes

COUNTS = {"train": 6, "t10k": 4}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private fedaug cache dir (where checksums.json goes)."""
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "fedaug-cache"))
    return tmp_path / "fedaug-cache"


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records every file hashed by the checksum module."""
    calls: list[Path] = []
    real = checksums.hash_file

    def counting(path: Path, algorithm: str, *, gunzip: bool) -> str:
        calls.append(path)
        return real(path, algorithm, gunzip=gunzip)

    monkeypatch.setattr(checksums, "hash_file", counting)
    return calls


def _raw_files() -> dict[str, bytes]:
    """Uncompressed content of four tiny IDX files, keyed by the official .gz names."""
    rng = np.random.default_rng(0)
    files = {}
    for prefix, count in COUNTS.items():
        images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8).tobytes()
        files[f"{prefix}-images-idx3-ubyte.gz"] = idx_bytes(2051, (count, 28, 28), images)
        files[f"{prefix}-labels-idx1-ubyte.gz"] = idx_bytes(
            2049, (count,), bytes(i % 10 for i in range(count))
        )
    return files


def _fake_official(
    root: Path, monkeypatch: pytest.MonkeyPatch, *, gz_md5_matches: bool = True, unpacked: bool = False
) -> Path:
    """Writes tiny MNIST files under ``root/mnist`` and makes them "official" (patched md5s and sizes)."""
    folder = root / "mnist"
    folder.mkdir(parents=True)
    raw = _raw_files()
    gz_md5, content_md5 = {}, {}
    for name, content in raw.items():
        data = content if unpacked else gzip.compress(content, mtime=0)
        (folder / (name.removesuffix(".gz") if unpacked else name)).write_bytes(data)
        gz_md5[name] = hashlib.md5(data).hexdigest() if gz_md5_matches and not unpacked else "0" * 32
        content_md5[name] = hashlib.md5(content).hexdigest()
    monkeypatch.setattr(mnist, "MNIST_MD5", gz_md5)
    monkeypatch.setattr(mnist, "MNIST_CONTENT_MD5", content_md5)
    monkeypatch.setattr(mnist, "IDX_SIZES", {name: len(content) for name, content in raw.items()})
    return folder


def _overwrite_labels(path: Path) -> None:
    """Half the labels overwritten: same uncompressed size, other bytes, a later mtime."""
    before = path.stat().st_mtime_ns
    content = bytearray(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    half = (len(content) - 8) // 2
    content[8 : 8 + half] = bytes([9]) * half
    path.write_bytes(gzip.compress(bytes(content)) if path.suffix == ".gz" else bytes(content))
    os.utime(path, ns=(before + 10**9, before + 10**9))  # a new version even on coarse-mtime filesystems


def test_matching_files_pass_and_are_hashed_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hashes: list[Path],
    cache: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _fake_official(tmp_path, monkeypatch)
    with caplog.at_level(logging.INFO, logger="fedaug.data.checksums"):
        data = load_dataset("mnist", data_dir=tmp_path, normalize=False)
    assert data.num_train == 6 and len(hashes) == 4  # the .gz md5s match: no decompression needed
    assert "mnist: verified train-images-idx3-ubyte.gz (md5)" in caplog.text
    entries = json.loads((cache / "checksums.json").read_text())["files"]
    assert str((tmp_path / "mnist" / "train-labels-idx1-ubyte.gz").resolve()) in entries
    load_dataset("mnist", data_dir=tmp_path)
    assert len(hashes) == 4  # second load: every verdict from the cache


def test_recompressed_and_unpacked_copies_pass_by_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[Path]
) -> None:
    _fake_official(tmp_path / "gz", monkeypatch, gz_md5_matches=False)
    load_dataset("mnist", data_dir=tmp_path / "gz")
    assert len(hashes) == 8  # the .gz md5 differs (re-compressed), the uncompressed md5 matches
    _fake_official(tmp_path / "raw", monkeypatch, unpacked=True)
    load_dataset("mnist", data_dir=tmp_path / "raw")
    assert len(hashes) == 12


def test_unpacked_file_without_a_known_content_digest_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    _fake_official(tmp_path, monkeypatch, unpacked=True)
    monkeypatch.setattr(mnist, "MNIST_CONTENT_MD5", {})  # only the .gz md5s are known
    with caplog.at_level(logging.DEBUG, logger="fedaug.data.checksums"):
        load_dataset("mnist", data_dir=tmp_path)
    assert hashes == [] and "not verified" in caplog.text


@pytest.mark.parametrize("unpacked", [False, True])
def test_modified_file_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[Path], unpacked: bool
) -> None:
    folder = _fake_official(tmp_path, monkeypatch, unpacked=unpacked)
    load_dataset("mnist", data_dir=tmp_path)  # verified and cached
    victim = folder / ("t10k-labels-idx1-ubyte" + ("" if unpacked else ".gz"))
    _overwrite_labels(victim)
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", data_dir=tmp_path)
    message = str(info.value)
    expected = mnist.MNIST_CONTENT_MD5["t10k-labels-idx1-ubyte.gz"]
    found = hashlib.md5(gzip.decompress(victim.read_bytes()) if not unpacked else victim.read_bytes())
    assert "\n" not in message and str(victim) in message
    assert f"expected md5 {expected}" in message and f"found {found.hexdigest()}" in message
    assert "--set data.download=true" in message and "--set data.verify=false" in message


def test_touched_file_is_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[Path]
) -> None:
    folder = _fake_official(tmp_path, monkeypatch)
    load_dataset("mnist", data_dir=tmp_path)
    touched = folder / "train-images-idx3-ubyte.gz"
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    load_dataset("mnist", data_dir=tmp_path)
    assert hashes[4:] == [touched]


def test_verify_false_skips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[Path]) -> None:
    folder = _fake_official(tmp_path, monkeypatch)
    _overwrite_labels(folder / "train-labels-idx1-ubyte.gz")
    data = load_dataset("mnist", data_dir=tmp_path, verify=False)
    assert data.y_train[:3].tolist() == [9, 9, 9] and hashes == []


def test_files_of_other_sizes_are_custom_copies(tmp_path: Path, hashes: list[Path]) -> None:
    folder = tmp_path / "fashion_mnist"
    folder.mkdir()
    for name, content in _raw_files().items():  # official names, not the official sizes
        (folder / name).write_bytes(gzip.compress(content))
    assert load_dataset("fashion_mnist", data_dir=tmp_path).num_test == 4 and hashes == []


def test_fashion_mnist_is_checked_against_its_own_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_official(tmp_path, monkeypatch)
    (tmp_path / "mnist").rename(tmp_path / "fashion_mnist")
    monkeypatch.setattr(fashion_mnist, "FASHION_MD5", {})
    with pytest.raises(DatasetError, match=r"official fashion_mnist file .* expected md5 f4a8712d"):
        load_dataset("fashion_mnist", data_dir=tmp_path)


def test_unreadable_cache_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[Path], cache: Path
) -> None:
    _fake_official(tmp_path, monkeypatch)
    cache.mkdir(parents=True)
    (cache / "checksums.json").write_text("{not json")
    load_dataset("mnist", data_dir=tmp_path)
    load_dataset("mnist", data_dir=tmp_path)
    assert len(hashes) == 4 and json.loads((cache / "checksums.json").read_text())["version"] == 1


def test_cli_refuses_a_broken_copy_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _fake_official(tmp_path / "data", monkeypatch)
    _overwrite_labels(folder / "train-labels-idx1-ubyte.gz")
    out = tmp_path / "runs"
    argv = [
        "run",
        str(SMOKE),
        "--out-dir",
        str(out),
        "--set",
        "data=mnist",
        "--set",
        f"data.data_dir={tmp_path / 'data'}",
        "--set",
        "model=mlp",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "train-labels-idx1-ubyte.gz does not match the official mnist file" in err[0]
    assert "data.verify=false" in err[0]
    assert not any(out.rglob("metrics.jsonl"))


# ---- CIFAR: the archive's check is cached and skippable; the pickles are always checked ----------------


def _fake_cifar100_archive(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    contents = {
        "train": {b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 1], b"coarse_labels": [0, 1]},
        "test": {b"data": np.zeros((1, 3072), np.uint8), b"fine_labels": [2], b"coarse_labels": [2]},
        "meta": {
            b"fine_label_names": [f"f{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"c{i}".encode() for i in range(20)],
        },
    }
    folder = root / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    md5s = {}
    for name, content in contents.items():
        data = pickle.dumps(content)
        (folder / name).write_bytes(data)
        md5s[name] = hashlib.md5(data).hexdigest()
    archive = root / "cifar100" / "cifar-100-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(folder, arcname="cifar-100-python")
    for name in contents:
        (folder / name).unlink()
    folder.rmdir()
    monkeypatch.setattr(cifar100, "FILE_MD5", md5s)
    digest = hashlib.md5(archive.read_bytes()).hexdigest()
    monkeypatch.setattr(cifar100, "ARCHIVE", RemoteFile(archive.name, (), digest))
    return archive


def test_cifar_archive_checked_once_and_skippable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashes: list[Path]
) -> None:
    archive = _fake_cifar100_archive(tmp_path, monkeypatch)
    load_dataset("cifar100", data_dir=tmp_path)
    load_dataset("cifar100", data_dir=tmp_path)
    assert hashes == [archive]
    monkeypatch.setattr(cifar100, "ARCHIVE", RemoteFile(archive.name, (), "0" * 32))
    with pytest.raises(DatasetError, match=r"expected md5 0{32} of the \.gz, found .*data\.verify=false"):
        load_dataset("cifar100", data_dir=tmp_path)
    assert load_dataset("cifar100", data_dir=tmp_path, verify=False).num_train == 2
    monkeypatch.setattr(cifar100, "FILE_MD5", {**cifar100.FILE_MD5, "test": "1" * 32})
    with pytest.raises(DatasetError, match="pickles are always checked"):
        load_dataset("cifar100", data_dir=tmp_path, verify=False)


# ---- the real offline copies --------------------------------------------------------------------------


@pytest.mark.slow
def test_real_mnist_is_verified_and_fashion_labels_are_refused(tmp_path: Path) -> None:
    if not (SHARED_DATA / "mnist").is_dir():
        pytest.skip("../shared/data is not present")
    assert (
        checksums.verify_files(
            [
                (
                    SHARED_DATA / "mnist" / name,
                    mnist.officialidx_bytes(mnist.MNIST_MD5, mnist.MNIST_CONTENT_MD5)[name],
                )
                for name in mnist.IDX_FILES
            ],
            dataset="mnist",
        )
        == 8
    )  # re-compressed copies: the .gz md5 and the data's md5 of each file
    swapped = tmp_path / "mnist"
    swapped.mkdir()
    for name in mnist.IDX_FILES:
        source = SHARED_DATA / ("fashion_mnist" if name == "train-labels-idx1-ubyte.gz" else "mnist") / name
        (swapped / name).write_bytes(source.read_bytes())
    with pytest.raises(DatasetError, match=r"train-labels-idx1-ubyte\.gz does not match the official mnist"):
        load_dataset("mnist", data_dir=tmp_path)


def test_file_digests_hash_a_file_only_when_its_size_or_mtime_changed(
    tmp_path: Path, hashes: list[Path]
) -> None:
    """What keys the processed-data cache (issue 68): one SHA-256 per file version, read from
    checksums.json at every other start."""
    source = tmp_path / "data.bin"
    source.write_bytes(b"abcdef")
    assert checksums.file_digests([source]) == {source: hashlib.sha256(b"abcdef").hexdigest()}
    checksums.file_digests([source])
    assert hashes == [source]
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    checksums.file_digests([source])
    assert hashes == [source, source]

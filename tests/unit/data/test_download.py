"""Tests of the download / checksum / atomic-write / extraction helpers and the processed-array cache.

Nothing here touches the network: "downloads" use ``file://`` URLs of local temp files.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from fedaug.data.cache import cache_key, load_or_build, source_signature
from fedaug.data.download import (
    RemoteFile,
    atomic_write,
    download_file,
    extract_archive,
    file_digest,
    verify_checksum,
)
from fedaug.errors import DatasetError

PAYLOAD = b"fedaug test payload\n" * 100


@pytest.fixture
def source_file(tmp_path: Path) -> Path:
    path = tmp_path / "remote" / "payload.bin"
    path.parent.mkdir()
    path.write_bytes(PAYLOAD)
    return path


def test_file_digest_md5_and_sha256(source_file: Path) -> None:
    assert file_digest(source_file, "md5") == hashlib.md5(PAYLOAD).hexdigest()
    assert file_digest(source_file, "sha256") == hashlib.sha256(PAYLOAD).hexdigest()
    with pytest.raises(ValueError, match="sha1"):
        file_digest(source_file, "sha1")


def test_verify_checksum_accepts_good_and_names_corrupt_file(source_file: Path) -> None:
    verify_checksum(source_file, hashlib.md5(PAYLOAD).hexdigest().upper(), algorithm="md5")
    verify_checksum(source_file, hashlib.sha256(PAYLOAD).hexdigest(), algorithm="sha256")
    with pytest.raises(DatasetError, match="checksum mismatch") as info:
        verify_checksum(source_file, "0" * 32, algorithm="md5")
    assert str(source_file) in str(info.value) and "0" * 32 in str(info.value)


def test_verify_checksum_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read"):
        verify_checksum(tmp_path / "absent.gz", "0" * 32)


def test_atomic_write_replaces_only_on_success(tmp_path: Path) -> None:
    dest = tmp_path / "out.bin"
    with atomic_write(dest) as tmp:
        tmp.write_bytes(b"new")
    assert dest.read_bytes() == b"new"
    with pytest.raises(RuntimeError), atomic_write(dest) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert dest.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_download_file_verifies_and_writes_atomically(tmp_path: Path, source_file: Path) -> None:
    # Prepare: the first mirror does not exist, the second is the local file
    good = RemoteFile(
        "payload.bin",
        (f"file://{tmp_path}/nowhere.bin", source_file.as_uri()),
        hashlib.md5(PAYLOAD).hexdigest(),
    )
    # Execute
    path = download_file(good, tmp_path / "data")
    # Assert
    assert path.read_bytes() == PAYLOAD
    assert download_file(good, tmp_path / "data") == path  # existing file: verified, reused


def test_download_file_checksum_mismatch_leaves_nothing(tmp_path: Path, source_file: Path) -> None:
    bad = RemoteFile("payload.bin", (source_file.as_uri(),), "f" * 64, algorithm="sha256")
    with pytest.raises(DatasetError, match=r"checksum mismatch for payload\.bin"):
        download_file(bad, tmp_path / "data")
    assert list((tmp_path / "data").iterdir()) == []


def test_download_file_existing_corrupt_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "payload.bin").write_bytes(b"truncated")
    remote = RemoteFile("payload.bin", ("file:///nowhere",), hashlib.md5(PAYLOAD).hexdigest())
    with pytest.raises(DatasetError, match=str(tmp_path / "payload.bin")):
        download_file(remote, tmp_path)


def test_download_file_validate_hook_and_all_mirrors_failing(tmp_path: Path, source_file: Path) -> None:
    def reject(path: Path) -> None:
        raise DatasetError(f"bad content in {path.name}")

    with pytest.raises(DatasetError, match="bad content"):
        download_file(RemoteFile("p.bin", (source_file.as_uri(),), None), tmp_path / "a", validate=reject)
    with pytest.raises(DatasetError, match=r"could not download p\.bin"):
        download_file(RemoteFile("p.bin", (f"file://{tmp_path}/none",), None), tmp_path / "b")


def _tar_with(tmp_path: Path, members: dict[str, bytes]) -> Path:
    archive = tmp_path / "archive.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return archive


def test_extract_archive(tmp_path: Path) -> None:
    archive = _tar_with(tmp_path, {"top/a.txt": b"a", "top/sub/b.txt": b"b"})
    created = extract_archive(archive, tmp_path / "out")
    assert created == [tmp_path / "out" / "top"]
    assert (tmp_path / "out" / "top" / "sub" / "b.txt").read_bytes() == b"b"
    with pytest.raises(DatasetError, match="already exists"):
        extract_archive(archive, tmp_path / "out")


def test_extract_archive_rejects_unsafe_paths(tmp_path: Path) -> None:
    archive = _tar_with(tmp_path, {"../evil.txt": b"x"})
    with pytest.raises(DatasetError, match="unsafe member path"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_cache_builds_once_and_keys_on_params_and_source(tmp_path: Path, source_file: Path) -> None:
    calls: list[int] = []

    def build() -> dict[str, np.ndarray]:
        calls.append(1)
        return {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "names": np.array(["a", "b"])}

    signature = source_signature([source_file])
    first = load_or_build(tmp_path / "c", "demo", params={"n": 1}, signature=signature, build=build)
    second = load_or_build(tmp_path / "c", "demo", params={"n": 1}, signature=signature, build=build)
    assert len(calls) == 1
    np.testing.assert_array_equal(first["x"], second["x"])
    assert second["names"].tolist() == ["a", "b"]
    load_or_build(tmp_path / "c", "demo", params={"n": 2}, signature=signature, build=build)
    assert len(calls) == 2
    assert cache_key({"n": 1}, signature) != cache_key({"n": 1}, "other-source")


def test_cache_rebuilds_a_corrupt_entry(tmp_path: Path) -> None:
    def build() -> dict[str, np.ndarray]:
        return {"x": np.ones(3)}

    load_or_build(tmp_path, "demo", params={}, signature="s", build=build)
    entry = tmp_path / "demo" / cache_key({}, "s")
    (entry / "x.npy").write_bytes(b"garbage")
    again = load_or_build(tmp_path, "demo", params={}, signature="s", build=build)
    np.testing.assert_array_equal(again["x"], np.ones(3))
    np.testing.assert_array_equal(np.load(entry / "x.npy"), np.ones(3))

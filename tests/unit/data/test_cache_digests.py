"""Processed-data caches keyed by their sources' content (issue 68): a built-in dataset's cached arrays
(``~/.cache/fedaug/processed``) are found by the SHA-256 of the files they were made from, so a changed
or corrupted source file is a logged recompute (a WARNING naming the file and its old and new digest), a
touched one (same content, new mtime) keeps its entry, and an entry made before the digests is used, not
rebuilt.

Before: the key held each file's name, size and mtime only: a changed source was rebuilt without a word (the
stale entry kept), and a touched one was rebuilt for nothing. A file changed under the same size and mtime
is still trusted: digests are taken only when size or mtime change (``checksums.json``).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedaug.data.cache import load_or_build, source_signature
from fedaug.data.datasets import load_dataset


@pytest.fixture(autouse=True)
def own_checksum_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "fedaug_cache"))


class Builds:
    """A build function that counts its calls and returns the source's bytes as an array."""

    def __init__(self, source: Path) -> None:
        self.source, self.calls = source, 0

    def __call__(self) -> dict[str, np.ndarray]:
        self.calls += 1
        return {"x": np.frombuffer(self.source.read_bytes(), dtype=np.uint8).copy()}


def _load(root: Path, build: Builds) -> dict[str, np.ndarray]:
    return load_or_build(root, "demo", params={"v": 1}, sources=[build.source], build=build)


def _bump_mtime(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_the_entry_records_the_sources_digest_and_is_built_once(tmp_path: Path) -> None:
    source = tmp_path / "data.bin"
    source.write_bytes(b"abcdef")
    build = Builds(source)
    _load(tmp_path / "c", build)
    again = _load(tmp_path / "c", build)
    assert build.calls == 1 and again["x"].tobytes() == b"abcdef"
    (entry,) = (tmp_path / "c" / "demo").iterdir()
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["sources"] == {"data.bin": hashlib.sha256(b"abcdef").hexdigest()}


def test_a_touched_source_keeps_its_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = tmp_path / "data.bin"
    source.write_bytes(b"abcdef")
    build = Builds(source)
    _load(tmp_path / "c", build)
    _bump_mtime(source)  # copied again, or the shared folder made anew: same bytes
    with caplog.at_level(logging.WARNING):
        _load(tmp_path / "c", build)
    assert build.calls == 1 and not caplog.records
    assert len(list((tmp_path / "c" / "demo").iterdir())) == 1


def test_a_corrupted_source_is_a_warning_and_a_recompute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a cached entry, then one byte of the source changed under the same size
    source = tmp_path / "data.bin"
    source.write_bytes(b"abcdef")
    build = Builds(source)
    _load(tmp_path / "c", build)
    source.write_bytes(b"abcXef")
    _bump_mtime(source)
    # Execute
    with caplog.at_level(logging.WARNING):
        arrays = _load(tmp_path / "c", build)
    # Assert
    assert build.calls == 2 and arrays["x"].tobytes() == b"abcXef"
    (record,) = caplog.records
    old, new = hashlib.sha256(b"abcdef").hexdigest()[:12], hashlib.sha256(b"abcXef").hexdigest()[:12]
    message = record.getMessage()
    assert record.levelname == "WARNING"
    assert message.startswith("demo: source files changed since the cached arrays in "), message
    assert message.endswith(f": data.bin (sha256 {old} -> {new}); building them again"), message


def test_a_source_that_is_added_or_gone_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(b"a")
    second.write_bytes(b"b")
    build = Builds(first)
    load_or_build(tmp_path / "c", "demo", params={}, sources=[first], build=build)
    with caplog.at_level(logging.WARNING):
        load_or_build(tmp_path / "c", "demo", params={}, sources=[second], build=build)
    assert build.calls == 2
    assert caplog.records[0].getMessage().endswith(": b.bin (new), a.bin (gone); building them again")


def test_an_entry_from_before_the_digests_is_moved_not_rebuilt(tmp_path: Path) -> None:
    # Prepare: an entry keyed as fedaug wrote it before (name, size and mtime)
    source = tmp_path / "data.bin"
    source.write_bytes(b"abcdef")
    build = Builds(source)
    signature = source_signature([source])
    load_or_build(tmp_path / "c", "demo", params={"v": 1}, signature=signature, build=build)
    (legacy,) = (tmp_path / "c" / "demo").iterdir()
    assert "sources" not in json.loads((legacy / "meta.json").read_text())
    # Execute
    arrays = _load(tmp_path / "c", build)
    # Assert: used where it is (older fedaug versions sharing the cache look there), its digests recorded
    assert build.calls == 1 and arrays["x"].tobytes() == b"abcdef"
    assert list((tmp_path / "c" / "demo").iterdir()) == [legacy]
    assert "sources" in json.loads((legacy / "meta.json").read_text())
    _bump_mtime(source)  # its old key is gone with the mtime: the recorded digests still find it
    _load(tmp_path / "c", build)
    assert build.calls == 1


def _jpeg_archive(path: Path, colour: tuple[int, int, int]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for split in ("train", "test"):
            for cls in ("airplane", "truck"):
                buffer = io.BytesIO()
                Image.new("RGB", (32, 32), colour).save(buffer, format="JPEG", quality=75)
                info = tarfile.TarInfo(f"CIFAR-10-images/{split}/{cls}/0000.jpg")
                info.size = len(buffer.getvalue())
                tf.addfile(info, io.BytesIO(buffer.getvalue()))


def test_a_built_in_datasets_changed_archive_is_decoded_again_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a CIFAR-10 JPEG archive, loaded (and cached) once, then replaced under the same name and mtime
    folder = tmp_path / "cifar10_jpeg_lossy"
    folder.mkdir()
    archive = folder / "CIFAR-10-images_test.tar.gz"
    _jpeg_archive(archive, (200, 30, 30))
    options = {"data_dir": tmp_path, "cache_dir": tmp_path / "cache", "variant": "jpeg_lossy"}
    first = load_dataset("cifar10", **options)
    stat = archive.stat()
    _jpeg_archive(archive, (20, 40, 220))
    os.utime(archive, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    # Execute
    with caplog.at_level(logging.WARNING):
        second = load_dataset("cifar10", **options)
    # Assert
    warnings = [r.getMessage() for r in caplog.records if r.name == "fedaug.data.cache"]
    assert len(warnings) == 1 and "CIFAR-10-images_test.tar.gz (sha256 " in warnings[0], warnings
    assert warnings[0].startswith("cifar10_jpeg_lossy: source files changed since the cached arrays in ")
    assert not np.array_equal(first.x_train.numpy(), second.x_train.numpy())

"""Download, checksum and atomic-write helpers shared by the dataset loaders.

Every download goes to a temporary file next to its destination, is verified (md5 or sha256 against the
official checksum, and/or a loader-supplied ``validate`` function), and only then renamed into place with
:func:`os.replace`, so an interrupted or corrupt download never leaves a file that looks complete. A file that
fails verification is a :class:`~fedaug.errors.DatasetError` naming it, with the expected and actual digest.

Archives are extracted into a temporary sibling folder that is renamed when complete; member paths that
would escape the destination (absolute, ``..``, links) are rejected.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fedaug.errors import DatasetError

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
USER_AGENT = "fedaug-dataset-downloader"
HASH_ALGORITHMS = ("md5", "sha256")


@dataclass(frozen=True)
class RemoteFile:
    """A file published at one or more URLs (mirrors tried in order) with its official checksum.

    Attributes:
        filename: name to store it under.
        urls: download URLs, tried in order.
        checksum: hex digest, or None when the publisher gives none (then ``validate`` must check content).
        algorithm: ``"md5"`` or ``"sha256"``.
    """

    filename: str
    urls: tuple[str, ...]
    checksum: str | None
    algorithm: str = "md5"


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in 1 MiB chunks."""
    if algorithm not in HASH_ALGORITHMS:
        raise ValueError(f"unknown hash algorithm {algorithm!r}; valid: {', '.join(HASH_ALGORITHMS)}")
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checksum(path: Path, expected: str, *, algorithm: str = "md5", label: str | None = None) -> None:
    """Raises DatasetError unless ``path`` exists and has digest ``expected``.

    Args:
        path: the file to check.
        expected: expected hex digest (case-insensitive).
        algorithm: ``"md5"`` or ``"sha256"``.
        label: name to use in the message instead of ``path`` (e.g. the official file name of a temp file).
    """
    shown = label or str(path)
    try:
        actual = file_digest(path, algorithm)
    except OSError as exc:
        raise DatasetError(f"cannot read {shown}: {exc}") from exc
    if actual.lower() != expected.lower():
        raise DatasetError(
            f"checksum mismatch for {shown}: expected {algorithm} {expected}, got {actual}. "
            f"The file is corrupt or incomplete; delete it and load again (download=True re-fetches it)."
        )


@contextlib.contextmanager
def atomic_write(dest: Path) -> Iterator[Path]:
    """Yields a temporary path beside ``dest``; on success it replaces ``dest``, on error it is removed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _fetch(url: str, dest: Path, timeout: float) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:
        shutil.copyfileobj(response, out, CHUNK_BYTES)


def download_file(
    remote: RemoteFile,
    dest_dir: Path,
    *,
    validate: Callable[[Path], None] | None = None,
    timeout: float = 60.0,
) -> Path:
    """Downloads ``remote`` into ``dest_dir`` atomically and verifies it; returns the final path.

    An existing file is verified and reused. Each mirror is tried in turn; a network error moves on to the
    next mirror, a checksum or validation failure raises at once (the content itself is wrong).

    Raises:
        DatasetError: every mirror failed, or the file failed verification (the message names it).
    """
    dest = dest_dir / remote.filename
    if dest.exists():
        _verify(remote, dest, validate, label=str(dest))
        return dest
    errors: list[str] = []
    for url in remote.urls:
        logger.info("downloading %s -> %s", url, dest)
        try:
            with atomic_write(dest) as tmp:
                _fetch(url, tmp, timeout)
                # A DatasetError here propagates (wrong content); atomic_write then removes the temp file.
                _verify(remote, tmp, validate, label=f"{remote.filename} downloaded from {url}")
        except OSError as exc:
            errors.append(f"{url}: {exc}")
            logger.warning("download of %s failed: %s", url, exc)
            continue
        return dest
    raise DatasetError(f"could not download {remote.filename} ({'; '.join(errors)})")


def _verify(remote: RemoteFile, path: Path, validate: Callable[[Path], None] | None, label: str) -> None:
    if remote.checksum is not None:
        verify_checksum(path, remote.checksum, algorithm=remote.algorithm, label=label)
    if validate is not None:
        validate(path)


def _safe_member_path(name: str, archive: Path) -> PurePosixPath:
    member = PurePosixPath(name)
    if member.is_absolute() or ".." in member.parts:
        raise DatasetError(f"archive {archive} has an unsafe member path {name!r}")
    return member


def extract_archive(archive: Path, dest_dir: Path) -> list[Path]:
    """Extracts a .tar(.gz/.xz/.bz2) or .zip archive into ``dest_dir``; returns the top-level paths created.

    The archive is unpacked into a temporary folder first and each top-level entry is then renamed into
    ``dest_dir``, so a failed extraction leaves nothing behind that looks complete.

    Raises:
        DatasetError: the archive is unreadable, a member path would escape ``dest_dir``, or a top-level entry
            already exists in ``dest_dir``.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{archive.name}.", dir=dest_dir))
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, tmp)
        else:
            _extract_tar(archive, tmp)
        created = []
        for entry in sorted(tmp.iterdir()):
            target = dest_dir / entry.name
            if target.exists():
                raise DatasetError(f"cannot extract {archive}: {target} already exists")
            os.replace(entry, target)
            created.append(target)
        return created
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
        raise DatasetError(f"cannot extract {archive}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            _safe_member_path(info.filename, archive)
        zf.extractall(dest)


def _extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        for member in members:
            _safe_member_path(member.name, archive)
            if member.issym() or member.islnk():
                raise DatasetError(
                    f"archive {archive} has a link member {member.name!r}; refusing to extract"
                )
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: also strips odd permissions
            tf.extractall(dest, members=members, filter="data")
        else:
            tf.extractall(dest, members=members)

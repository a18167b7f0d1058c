"""Verifying local copies of official dataset files against the published checksums, once per file version.

A loader that recognises an official file (MNIST/Fashion-MNIST IDX files, the CIFAR python archives) passes
it with its :class:`Official` record to :func:`verify_files`. A file is *recognised* when its name is an
official one and, where the official size is known, its (uncompressed) size matches: a smaller hand-made
subset with official names is a custom copy, not a corrupt official file, and is only checked structurally.

A gzipped file passes when either the file's digest equals the published digest of the ``.gz`` or the digest
of its decompressed bytes equals the published digest of the uncompressed file (re-compressed copies, like
those in ``../shared/data``, have other ``.gz`` digests but the same content). An unpacked file is compared
with the uncompressed digest; if only the archive's digest is published it is skipped (debug log).

Digests are cached in ``<cache_dir()>/checksums.json`` keyed by absolute path, size and ``mtime_ns``, so each
file version is hashed once; editing or touching a file re-hashes it. A mismatch is a one-line
:class:`~fedaug.errors.DatasetError` naming the file, the expected and found digest, and the remedy.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaug.errors import DatasetError
from fedaug.runtime.paths import cache_dir

logger = logging.getLogger(__name__)

CACHE_FILE = "checksums.json"
CACHE_VERSION = 1
CHUNK_BYTES = 1 << 20
REMEDY = (
    "delete it and re-download with --set data.download=true, or pass --set data.verify=false "
    "if it is a deliberately modified copy"
)


@dataclass(frozen=True)
class Official:
    """What is published about one official file.

    Attributes:
        name: the official file name (``train-images-idx3-ubyte.gz``, ``cifar-10-python.tar.gz``).
        digest: digest of the file as published (e.g. of the ``.gz``), or None.
        content_digest: digest of the uncompressed content (for ``.gz`` files), or None.
        size: uncompressed size in bytes, or None; a file of another size is not recognised (not verified).
        algorithm: ``"md5"`` or ``"sha256"``.
    """

    name: str
    digest: str | None = None
    content_digest: str | None = None
    size: int | None = None
    algorithm: str = "md5"


def hash_file(path: Path, algorithm: str, *, gunzip: bool) -> str:
    """Hex digest of ``path`` (of its decompressed bytes when ``gunzip``), read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    opener = gzip.open if gunzip else open
    with opener(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _uncompressed_size(path: Path, size: int) -> int:
    """The gzip ISIZE trailer (uncompressed size mod 2**32) of a ``.gz`` file, else ``size``."""
    if path.suffix != ".gz":
        return size
    if size < 18:
        return -1
    with open(path, "rb") as handle:
        handle.seek(-4, os.SEEK_END)
        return int.from_bytes(handle.read(4), "little")


def _cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def _load_cache() -> dict[str, Any]:
    try:
        data = json.loads(_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _save_cache(files: dict[str, Any]) -> None:
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"version": CACHE_VERSION, "files": files}, handle, indent=1, sort_keys=True)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except OSError as exc:  # a read-only cache only costs a re-hash next time
        logger.debug("cannot write the checksum cache %s: %s", path, exc)


class _Verifier:
    """One batch of files: the cache is read once and written once."""

    def __init__(self) -> None:
        self.cache = _load_cache()
        self.changed = False
        self.hashed = 0

    def digest(self, path: Path, stat: os.stat_result, algorithm: str, *, gunzip: bool) -> str:
        key = str(path.resolve())
        entry = self.cache.get(key)
        if not (
            isinstance(entry, dict)
            and entry.get("size") == stat.st_size
            and entry.get("mtime_ns") == stat.st_mtime_ns
        ):
            entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
            self.cache[key] = entry
        slot = f"content_{algorithm}" if gunzip else algorithm
        found = entry.get(slot)
        if not isinstance(found, str):
            try:
                found = hash_file(path, algorithm, gunzip=gunzip)
            except (OSError, EOFError, zlib.error) as exc:
                raise DatasetError(f"cannot read {path} to verify its checksum: {exc}") from exc
            self.hashed += 1
            entry[slot] = found
            self.changed = True
        return found

    def verify(self, path: Path, official: Official, dataset: str) -> str | None:
        """A short description of what was checked, None when the file is not recognised (skipped)."""
        stat = path.stat()
        if official.size is not None and _uncompressed_size(path, stat.st_size) != official.size:
            logger.debug(
                "%s: size differs from the official %s (%d bytes uncompressed); a custom copy, not verified",
                path,
                official.name,
                official.size,
            )
            return None
        gz = path.suffix == ".gz"
        checks: list[tuple[bool, str, str]] = []  # (gunzip, expected, what)
        if gz and official.digest:
            checks.append((False, official.digest, " of the .gz"))
        if official.content_digest:
            checks.append((gz, official.content_digest, " of the uncompressed data" if gz else ""))
        if not checks:
            logger.debug("%s: no official checksum of this form of %s; not verified", path, official.name)
            return None
        found = ""
        for gunzip, expected, _ in checks:
            found = self.digest(path, stat, official.algorithm, gunzip=gunzip)
            if found.lower() == expected.lower():
                return f"{path.name} ({official.algorithm}{' of the uncompressed data' if gunzip else ''})"
        expected_text = " or ".join(f"{official.algorithm} {exp}{what}" for _, exp, what in reversed(checks))
        raise DatasetError(
            f"{path} does not match the official {dataset} file {official.name}: expected {expected_text}, "
            f"found {found}; the file is corrupt or not the official one: {REMEDY}"
        )


def file_digests(paths: Sequence[Path]) -> dict[Path, str]:
    """The SHA-256 of each file in ``paths``, hashed only when its size or mtime differs from the version
    ``checksums.json`` holds (the cache :func:`verify_files` keeps): a start with unchanged files hashes none.

    Raises:
        DatasetError: a file cannot be read.
    """
    verifier = _Verifier()
    try:
        return {path: verifier.digest(path, path.stat(), "sha256", gunzip=False) for path in paths}
    finally:
        if verifier.changed:
            _save_cache(verifier.cache)


def verify_files(files: Sequence[tuple[Path, Official]], *, dataset: str) -> int:
    """Verifies each recognised file against its official checksum; returns how many files were hashed.

    Logs one line saying which files were verified (and which were not recognised).

    Raises:
        DatasetError: a recognised file does not match (one line: file, expected and found digest, remedy).
    """
    verifier = _Verifier()
    verified: list[str] = []
    skipped: list[str] = []
    try:
        for path, official in files:
            result = verifier.verify(path, official, dataset)
            (verified if result else skipped).append(result or path.name)
    finally:
        if verifier.changed:
            _save_cache(verifier.cache)
    if verified:
        cached = "" if verifier.hashed else ", digests from the cache"
        logger.info(
            "%s: verified %s against the official checksums%s",
            dataset,
            ", ".join(verified),
            cached,
        )
    if skipped:
        logger.info(
            "%s: not verified (no known official checksum for these files or sizes): %s",
            dataset,
            ", ".join(skipped),
        )
    return verifier.hashed

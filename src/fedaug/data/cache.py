"""On-disk cache of processed dataset arrays (decoded JPEGs, log-mel spectrograms, parsed text files).

Layout: ``<cache_dir>/<namespace>/<key>/<array>.npy`` plus ``meta.json``. The key is a hash of the processing
parameters and of the *content* of the source files: the SHA-256 of each (:func:`load_or_build` with
``sources``; hashed only when a file's size or mtime changed, :func:`fedaug.data.checksums.file_digests`),
recorded in ``meta.json``. So a changed parameter or a changed source file gives a new entry, never a stale
one; a source file that changed is named in a ``WARNING`` (its old and new digest) as its arrays are built
again, and one only touched or copied (same content, new mtime) keeps its entry. An entry made before the
digests (keyed by name, size and mtime, :func:`source_signature`) is used with the files unchanged, not
rebuilt (its digests are recorded beside it, and it stays where older fedaug versions look for it). A file
changed under the same size and mtime is trusted, as before: it is not hashed again (``checksums.json`` keeps
each file version's digest). Entries are written to a temporary folder and renamed into place, so a crash
never leaves a half-written entry; an unreadable entry is rebuilt. Arrays are stored as plain ``.npy`` (no
pickle) and turned into tensors with ``torch.from_numpy`` on load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedaug.data.checksums import file_digests
from fedaug.runtime.log_once import info_once

logger = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray]


def source_signature(paths: Iterable[Path]) -> str:
    """Hash of (name, size, mtime) of each file: cheap, and changes whenever a source file is replaced."""
    digest = hashlib.sha256()
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cache_key(params: Mapping[str, Any], signature: str) -> str:
    """Short stable key for processing ``params`` (JSON-serialisable) applied to a source ``signature``."""
    blob = json.dumps({"params": dict(params), "source": signature}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _read_entry(entry: Path) -> Arrays | None:
    meta_file = entry / "meta.json"
    if not meta_file.exists():
        return None
    try:
        names = json.loads(meta_file.read_text())["arrays"]
        return {name: np.load(entry / f"{name}.npy", allow_pickle=False) for name in names}
    except (OSError, ValueError, KeyError) as exc:
        logger.warning("cache entry %s is unreadable (%s); rebuilding it", entry, exc)
        return None


def _write_entry(
    entry: Path, arrays: Arrays, params: Mapping[str, Any], sources: Mapping[str, str] | None = None
) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", array, allow_pickle=False)
        meta: dict[str, Any] = {"arrays": sorted(arrays), "params": dict(params)}
        if sources is not None:
            meta["sources"] = dict(sources)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _digests(sources: Sequence[Path]) -> dict[str, str]:
    """Source file name -> SHA-256 (names as :func:`source_signature` takes them; a repeated name keeps
    its place by a numbered suffix)."""
    named: dict[str, str] = {}
    for path, digest in file_digests(sources).items():
        name, count = path.name, 1
        while name in named:
            count += 1
            name = f"{path.name}#{count}"
        named[name] = digest
    return named


def _recorded(folder: Path, params: Mapping[str, Any]) -> list[tuple[int, Path, dict[str, str]]]:
    """The entries in ``folder`` made with ``params`` that record their sources' digests, newest last."""
    found: list[tuple[int, Path, dict[str, str]]] = []
    for meta_file in folder.glob("*/meta.json"):
        try:
            meta = json.loads(meta_file.read_text())
            mtime = meta_file.stat().st_mtime_ns
        except (OSError, ValueError):
            continue
        same = isinstance(meta, dict) and _as_json(meta.get("params")) == _as_json(dict(params))
        if same and isinstance(meta.get("sources"), dict):
            found.append((mtime, meta_file.parent, meta["sources"]))
    return sorted(found, key=lambda item: item[0])


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _changes(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """What differs between two ``name -> digest`` records, in words (the first few files)."""
    parts = [
        f"{n} (sha256 {old[n][:12]} -> {new[n][:12]})"
        for n in sorted(old.keys() & new.keys())
        if old[n] != new[n]
    ]
    parts += [f"{n} (new)" for n in sorted(new.keys() - old.keys())]
    parts += [f"{n} (gone)" for n in sorted(old.keys() - new.keys())]
    more = f" and {len(parts) - 5} more" if len(parts) > 5 else ""
    return ", ".join(parts[:5]) + more


def _content_entry(
    folder: Path, params: Mapping[str, Any], sources: Sequence[Path]
) -> tuple[Path, dict[str, str], Arrays | None]:
    """The entry for ``sources``' content (its path, the digests, its arrays or None on a miss): the one
    under its content key, else any entry of the same params that recorded the same digests, else one made
    before the digests under the files' name, size and mtime (its digests recorded beside it: it stays
    where older fedaug versions look). A miss is logged as a WARNING naming what changed since the newest
    entry of the same params."""
    digests = _digests(sources)
    entry = folder / cache_key(params, json.dumps(digests, sort_keys=True))
    recorded = _recorded(folder, params)
    same = [path for _, path, found in recorded if found == digests]
    legacy = folder / cache_key(params, source_signature(sources))
    for candidate in [entry, *same, legacy]:
        cached = _read_entry(candidate)
        if cached is not None:
            if candidate == legacy and legacy not in same:
                _record_sources(legacy, digests)
            return candidate, digests, cached
    if recorded and recorded[-1][2] != digests:
        logger.warning(
            "%s: source files changed since the cached arrays in %s were made: %s; building them again",
            folder.name,
            recorded[-1][1],
            _changes(recorded[-1][2], digests),
        )
    return entry, digests, None


def _record_sources(entry: Path, digests: Mapping[str, str]) -> None:
    """Adds the sources' digests to an older entry's ``meta.json`` (a read-only cache: left as it is)."""
    meta_file = entry / "meta.json"
    try:
        meta = json.loads(meta_file.read_text())
        meta["sources"] = dict(digests)
        tmp = meta_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
        os.replace(tmp, meta_file)
    except (OSError, ValueError) as exc:
        logger.debug("could not record the sources' digests in %s: %s", meta_file, exc)


def load_or_build(
    cache_dir: Path,
    namespace: str,
    *,
    params: Mapping[str, Any],
    build: Callable[[], Arrays],
    sources: Sequence[Path] | None = None,
    signature: str | None = None,
) -> Arrays:
    """Returns the cached arrays for (params, the sources' content), building and storing them on a miss.

    Args:
        cache_dir: cache root.
        namespace: sub-folder, usually the dataset name and variant.
        params: processing parameters (part of the key and stored in ``meta.json``).
        build: computes the arrays on a cache miss.
        sources: the files the arrays are made from: the key holds their SHA-256 (see the module).
        signature: instead of ``sources``, a key of the caller's (a content checksum it computed).

    Returns:
        Mapping from array name to numpy array.
    """
    folder = cache_dir / namespace
    if sources is not None:
        entry, digests, cached = _content_entry(folder, params, sources)
    elif signature is not None:
        entry, digests = folder / cache_key(params, signature), None
        cached = _read_entry(entry)
    else:
        raise TypeError("load_or_build needs sources or a signature")
    if cached is not None:
        info_once(logger, "using cached %s arrays from %s", namespace, entry)
        return cached
    arrays = build()
    try:
        _write_entry(entry, arrays, params, digests)
        logger.info("cached %s arrays in %s", namespace, entry)
    except OSError as exc:
        logger.warning("could not write cache entry %s (%s); continuing without cache", entry, exc)
    return arrays

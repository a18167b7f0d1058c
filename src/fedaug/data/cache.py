"""On-disk cache of processed dataset arrays (decoded JPEGs, log-mel spectrograms, parsed text files).

Layout: ``<cache_dir>/<namespace>/<key>/<array>.npy`` plus ``meta.json``. The key is a hash of the processing
parameters and a *source signature* (name, size and mtime of every source file), so changing a parameter or
replacing a source file gives a new entry instead of a stale one. Entries are written to a temporary folder
and renamed into place, so a crash never leaves a half-written entry; an unreadable entry is rebuilt.
Arrays are stored as plain ``.npy`` (no pickle) and turned into tensors with ``torch.from_numpy`` on load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

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


def _write_entry(entry: Path, arrays: Arrays, params: Mapping[str, Any]) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", array, allow_pickle=False)
        meta = {"arrays": sorted(arrays), "params": dict(params)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_or_build(
    cache_dir: Path,
    namespace: str,
    *,
    params: Mapping[str, Any],
    signature: str,
    build: Callable[[], Arrays],
) -> Arrays:
    """Returns the cached arrays for (params, signature), building and storing them on a miss.

    Args:
        cache_dir: cache root.
        namespace: sub-folder, usually the dataset name and variant.
        params: processing parameters (part of the key and stored in ``meta.json``).
        signature: source signature from :func:`source_signature` or a content checksum.
        build: computes the arrays on a cache miss.

    Returns:
        Mapping from array name to numpy array.
    """
    entry = cache_dir / namespace / cache_key(params, signature)
    cached = _read_entry(entry)
    if cached is not None:
        info_once(logger, "using cached %s arrays from %s", namespace, entry)
        return cached
    arrays = build()
    try:
        _write_entry(entry, arrays, params)
        logger.info("cached %s arrays in %s", namespace, entry)
    except OSError as exc:
        logger.warning("could not write cache entry %s (%s); continuing without cache", entry, exc)
    return arrays

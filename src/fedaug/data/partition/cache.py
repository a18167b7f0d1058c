"""On-disk cache of partitions as ``.npz`` files keyed by a hash of the settings and the labels.

The key is the sha256 of the JSON of all settings (partitioner name, resolved parameters, seed, number of
clients, local test fraction, number of classes, cache format version) together with the sha256 of the label
array, so a changed setting *or* a changed dataset gives a new file and stale partitions are never reused. A
plugin partitioner's cache also records the SHA-256 of its plugin file: a partition made by other code is
made again, with a WARNING naming it.
Files are written atomically (temporary file, then rename) and read without pickle.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

CACHE_VERSION = 1


def labels_digest(labels: np.ndarray) -> str:
    """sha256 of the label array's shape and int64 bytes."""
    array = np.ascontiguousarray(labels, dtype=np.int64)
    digest = hashlib.sha256(str(array.shape).encode())
    digest.update(array.tobytes())
    return digest.hexdigest()


def cache_key(settings: dict[str, Any], labels: np.ndarray, num_classes: int) -> str:
    """sha256 over the settings, the number of classes, the format version and the labels' digest."""
    payload = {
        "version": CACHE_VERSION,
        "settings": settings,
        "num_classes": num_classes,
        "labels_sha256": labels_digest(labels),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def cache_path(cache_dir: Path, name: str, key: str) -> Path:
    """File of a partition: ``<cache_dir>/partition-<name>-<first 24 hex digits of key>.npz``."""
    return Path(cache_dir) / f"partition-{name}-{key[:24]}.npz"


def _flatten(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.array([part.size for part in parts], dtype=np.int64)
    flat = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    return flat, sizes


def _unflatten(flat: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    return [part.astype(np.int64) for part in np.split(flat, np.cumsum(sizes)[:-1])]


def save(
    path: Path,
    key: str,
    train: list[np.ndarray],
    test: list[np.ndarray] | None,
    settings: dict[str, Any],
    code: str | None = None,
) -> None:
    """Writes a partition's index arrays and settings to ``path`` atomically (``code``: the SHA-256 of the
    plugin file that defined the partitioner, None for a built-in)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    train_flat, train_sizes = _flatten(train)
    test_flat, test_sizes = _flatten(test or [])
    meta = {"key": key, "settings": settings, "has_test": test is not None}
    if code is not None:
        meta["code_sha256"] = code
    meta_text = json.dumps(meta, default=str)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(
                handle,
                train=train_flat,
                train_sizes=train_sizes,
                test=test_flat,
                test_sizes=test_sizes,
                meta=np.array(meta_text),
            )
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def load(
    path: Path, key: str, code: str | None = None, who: str = "partitioner"
) -> tuple[list[np.ndarray], list[np.ndarray] | None] | None:
    """Reads ``(train, test)`` index lists from ``path``; ``None`` if absent, unreadable, another key's, or
    made by other code than ``code`` (the plugin file's SHA-256 that defined ``who``; a WARNING says so)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.get("key") != key:
                return None
            if meta.get("code_sha256") != code:
                logger.warning(
                    "the partition cached in %s was made by other code of %s (its plugin file changed, "
                    "SHA-256 %s, now %s); partitioning again",
                    path,
                    who,
                    str(meta.get("code_sha256"))[:12],
                    str(code)[:12],
                )
                return None
            train = _unflatten(data["train"], data["train_sizes"])
            test = _unflatten(data["test"], data["test_sizes"]) if meta["has_test"] else None
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
        logger.warning("ignoring unreadable partition cache %s: %s", path, error)
        return None
    return train, test

"""Files fedaug writes: atomic, durable writes (:func:`atomic_write`, :func:`write_json`), and strict JSON for
the summaries: a statistic that does not exist is ``null``, never ``NaN``.

Python's :func:`json.dumps` writes ``NaN`` and ``Infinity`` by default, which no strict JSON parser accepts
(``jq``, browsers, JavaScript's ``JSON.parse``). A summary's sample std over one seed is NaN
(:func:`fedaug.results.store.aggregate`); :func:`dumps` writes it as ``null``, and refuses anything else that
is not JSON.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from fedaug.errors import path_error


def finite(value: Any) -> Any:
    """``value`` with each NaN or infinite float, in dicts, lists and tuples at any depth, made None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` of :func:`finite` ``value`` with ``allow_nan=False``: always strict JSON."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def _fsync_dir(path: Path) -> None:
    """Makes a rename in folder ``path`` durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Calls ``write`` on a temporary file beside ``path``, flushes and fsyncs it, and renames it to ``path``.

    Raises:
        PathError: the folder is missing or not writable, the disk is full, the name too long (one line naming
            the path; the temporary file is removed).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # disk full, a name too long, Ctrl-C: no temporary file is left behind
        _remove_quietly(tmp)
        if isinstance(exc, OSError):
            raise path_error(exc, path, "write") from None
        raise
    _fsync_dir(path.parent)


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically and durably (:func:`atomic_write`)."""
    atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    """Writes ``text`` (UTF-8) to ``path`` atomically and durably (:func:`atomic_write`)."""
    atomic_write_bytes(path, text.encode())


def write_json(path: Path, obj: Any) -> None:
    """Writes ``obj`` as indented JSON atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())

"""Content digests of what a run dir keeps, and the one error for a run file that fails them.

:func:`content_digest` is the SHA-256 every checkpoint carries of its content
(:mod:`fedaug.engine.checkpoint`) and the name of every pool file (:mod:`fedaug.engine.pool_files`);
:func:`corrupt_file` is the one-line error for a file that cannot be used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fedaug.errors import CheckpointError


def corrupt_file(path: Path, problem: str, what: str = "checkpoint") -> CheckpointError:
    """The one-line error for a run file that cannot be used: which file, why, and what to do."""
    return CheckpointError(
        f"{path} is corrupt or not a fedaug {what} ({problem}); restore it from a copy, or start the run "
        "over with `fedaug run ... --fresh`"
    )


def content_digest(obj: Any) -> str:
    """The SHA-256 of ``obj``'s content: tensors by dtype, shape and bytes (from whatever device), mappings by
    key in sorted order, sequences in order, anything else by ``repr``; equal before saving and after
    loading."""
    hasher = hashlib.sha256()
    feed_digest(hasher, obj)
    return hasher.hexdigest()


def feed_digest(hasher: Any, obj: Any) -> None:
    """Feeds ``obj`` into ``hasher`` as :func:`content_digest` describes (each tensor copied to the host once,
    as ``torch.save`` does right after: :mod:`tools.host_reads` does not count these reads)."""
    if isinstance(obj, torch.Tensor):
        hasher.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
        if obj.is_meta:  # no data to read (a state built on the meta device, as tests do): its shape only
            return
        flat = obj.detach().cpu().contiguous().reshape(-1)
        hasher.update(flat.view(torch.uint8).numpy() if flat.numel() else b"")
    elif isinstance(obj, Mapping):
        hasher.update(f"M{len(obj)}".encode())
        for key in sorted(obj, key=repr):
            hasher.update(f"K{key!r}".encode())
            feed_digest(hasher, obj[key])
    elif isinstance(obj, list | tuple):
        hasher.update(f"S{type(obj).__name__}{len(obj)}".encode())
        for item in obj:
            feed_digest(hasher, item)
    else:
        hasher.update(f"V{obj!r}".encode())

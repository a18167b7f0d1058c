"""A method's large server-state tensors (a shared data pool) kept in files of their own, written once.

FedData, FedMix, FedBR and ``centralized`` hold a data pool in ``ServerState.extra`` that never changes
after the share phase (:mod:`fedaug.methods.parts.data_pool`); FSDD's whole training set is 87 MB. Kept in
every round's checkpoint, it was hashed and serialised every round (about 0.6 s a round for those 87 MB:
``benchmarks/pool_checkpoint.py``). Instead, every tensor of ``state.extra`` of at least
:data:`POOL_MIN_BYTES` that is the same tensor, unchanged, as at an earlier save goes to
``ckpt/pool/<sha256>.pt``, named by its content digest (:func:`~fedaug.engine.integrity.content_digest`)
and written only when no such file exists, and the checkpoint holds a reference
(``{"fedaug_pool_file": "<sha256>"}``) in its place. So a pool is in round 1's checkpoint, in its file from
round 2 on, and costs a lookup in a :class:`DigestCache` (no hashing, no write) after that; a buffer rebuilt
every round (FLea's) stays in the checkpoint, as before. A pool file no checkpoint refers to any more (a pool
that changed) is removed.

Reading a checkpoint puts the files' tensors back in place of the references, each checked against its
name: a damaged or foreign pool file, or a missing one, is one :class:`~fedaug.errors.CheckpointError`.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from fedaug.engine.integrity import content_digest, corrupt_file
from fedaug.errors import CheckpointError
from fedaug.runtime.files import atomic_write

logger = logging.getLogger(__name__)

POOL_DIR = "pool"
"""The folder, beside the checkpoints (``ckpt/pool/``), of the pool files."""

POOL_MIN_BYTES = 1 << 16
"""Tensors of ``state.extra`` of at least this many bytes (64 KiB) go to pool files; smaller ones stay in the
checkpoint (a file per small tensor would cost more than it saves)."""

REFERENCE_KEY = "fedaug_pool_file"
"""The one key of a reference to a pool file in a checkpoint: ``{REFERENCE_KEY: <sha256 of the tensor>}``."""

POOL_FILE = "pool file"
"""What a pool file is called in errors (:func:`~fedaug.engine.integrity.corrupt_file`)."""

_Fingerprint = tuple[Any, ...]


def _fingerprint(tensor: torch.Tensor) -> _Fingerprint | None:
    """What changes when ``tensor``'s content may have: its version counter (torch bumps it on every
    in-place operation, through views and ``detach()`` too), storage, layout, dtype and device. None for an
    inference tensor (it has no version counter: never cached)."""
    if tensor.is_inference():
        return None
    layout = (tensor.data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
    return (tensor._version, *layout, tensor.dtype, tensor.device)


class DigestCache:
    """:func:`content_digest` of tensors, remembered per tensor object while its fingerprint is unchanged.

    A tensor changed in place gets a new version (torch's ``_version``), so its digest is computed afresh.
    Writes that bypass torch's version counter are not seen: through ``tensor.data``, through a NumPy array
    sharing its memory, or by another process. fedaug's methods change no pool that way (they build a new
    tensor); a method that did would need to hand the engine a new tensor instead.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[torch.Tensor], _Fingerprint, str | None]] = {}

    def digest(self, tensor: torch.Tensor) -> str:
        """``content_digest(tensor)``, hashed only when the tensor is new here or has changed."""
        entry = self._entry(tensor)
        if entry is not None and entry[2] is not None:
            return entry[2]
        digest = content_digest(tensor)
        self.remember(tensor, digest)
        return digest

    def unchanged(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` was seen here before (:meth:`digest`, :meth:`remember` or this) and has not
        changed since; if not, it counts as seen from now on (nothing is hashed)."""
        if self._entry(tensor) is not None:
            return True
        self._record(tensor, None)
        return False

    def remember(self, tensor: torch.Tensor, digest: str) -> None:
        """Records ``digest`` as ``tensor``'s (one just checked against it: a pool file read back)."""
        self._record(tensor, digest)

    def _entry(self, tensor: torch.Tensor) -> tuple[Any, _Fingerprint, str | None] | None:
        fingerprint = _fingerprint(tensor)
        entry = self._entries.get(id(tensor))
        if fingerprint is None or entry is None or entry[0]() is not tensor or entry[1] != fingerprint:
            return None
        return entry

    def _record(self, tensor: torch.Tensor, digest: str | None) -> None:
        fingerprint = _fingerprint(tensor)
        if fingerprint is None:
            return
        ident = id(tensor)
        self._entries[ident] = (weakref.ref(tensor, self._forget_fn(ident)), fingerprint, digest)

    def _forget_fn(self, ident: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
        def forget(ref: weakref.ref[torch.Tensor]) -> None:  # the tensor is gone: its id may be reused
            entry = self._entries.get(ident)
            if entry is not None and entry[0] is ref:
                del self._entries[ident]

        return forget


def _is_reference(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.keys() == {REFERENCE_KEY} and isinstance(obj[REFERENCE_KEY], str)


def pool_path(folder: Path, digest: str) -> Path:
    """The pool file of the tensor whose content digest is ``digest``."""
    return folder / POOL_DIR / f"{digest}.pt"


def references(obj: Any) -> set[str]:
    """The digests of the pool files that ``obj`` (a checkpoint as saved, or part of one) refers to."""
    if _is_reference(obj):
        return {obj[REFERENCE_KEY]}
    if isinstance(obj, Mapping):
        return set().union(*(references(value) for value in obj.values()))
    if isinstance(obj, list | tuple):
        return set().union(*(references(item) for item in obj))
    return set()


class PoolFiles:
    """The pool files of one run's ``ckpt/`` folder, written by the process that saves its checkpoints."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.digests = DigestCache()

    def externalize(self, obj: Any) -> Any:
        """``obj`` (a ``state.extra``) with every tensor of at least :data:`POOL_MIN_BYTES` that is unchanged
        since an earlier save (or read) replaced by a reference to its pool file, written now if no file of
        that digest exists. A tensor new here stays in the checkpoint: a buffer rebuilt every round (FLea's)
        costs what it did, and a pool that does not change goes to its file at its second save."""
        if isinstance(obj, torch.Tensor):
            if obj.is_meta or obj.numel() * obj.element_size() < POOL_MIN_BYTES:
                return obj
            if not self.digests.unchanged(obj):
                return obj
            digest = self.digests.digest(obj)
            path = pool_path(self.folder, digest)
            if not path.exists():
                path.parent.mkdir(exist_ok=True)
                # a view saves its whole storage: the tensor alone, compacted
                whole = obj.untyped_storage().nbytes() == obj.numel() * obj.element_size()
                saved = obj.detach() if whole and obj.is_contiguous() else obj.detach().clone()
                atomic_write(path, lambda handle: torch.save(saved, handle))
            return {REFERENCE_KEY: digest}
        if isinstance(obj, Mapping):
            return {key: self.externalize(value) for key, value in obj.items()}
        if isinstance(obj, list | tuple):
            return type(obj)(self.externalize(item) for item in obj)
        return obj

    def remove_unused(self, used: set[str]) -> None:
        """Deletes the pool files whose digest is not in ``used`` (left by a pool that changed, or by a
        process killed between writing a pool file and its checkpoint)."""
        for path in (self.folder / POOL_DIR).glob("*.pt"):
            if path.stem not in used:
                path.unlink(missing_ok=True)


def resolve(
    obj: Any,
    ckpt_path: Path,
    *,
    load: Callable[[Path], Any],
    digests: DigestCache | None = None,
) -> Any:
    """``obj`` (read from the checkpoint ``ckpt_path``) with each reference replaced by its pool file's
    tensor (read by ``load``), checked against the digest it is named by (not on the meta device: no data);
    ``digests`` remembers each checked tensor's digest.

    Raises:
        CheckpointError: a pool file that is missing, is not a tensor, or whose content does not match its
            name (one line naming the file and what to do).
    """
    if _is_reference(obj):
        digest = obj[REFERENCE_KEY]
        path = pool_path(ckpt_path.parent, digest)
        if not path.exists():
            raise CheckpointError(
                f"{ckpt_path} refers to the pool file {path}, which is missing; restore the run's "
                "ckpt/pool/ folder from a copy, or start the run over with `fedaug run ... --fresh`"
            )
        tensor = load(path)
        if not isinstance(tensor, torch.Tensor):
            raise corrupt_file(path, f"it holds a {type(tensor).__name__}, not a tensor", POOL_FILE)
        if not tensor.is_meta:
            if content_digest(tensor) != digest:
                problem = "its content does not match the SHA-256 digest it is named by"
                raise corrupt_file(path, problem, POOL_FILE)
            if digests is not None:
                digests.remember(tensor, digest)
        return tensor
    if isinstance(obj, Mapping):
        return {key: resolve(value, ckpt_path, load=load, digests=digests) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(resolve(item, ckpt_path, load=load, digests=digests) for item in obj)
    return obj

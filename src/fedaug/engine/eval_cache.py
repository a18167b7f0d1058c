"""Per-client evaluation results, kept while a client's model stays unchanged (a model per client).

A method that keeps a model per client (:class:`~fedaug.api.KeepsClientModels`, ``local``) hands the engine
all K clients' weights every round, but only the round's participants trained (FSDD: 7 of 27), so most of the
K evaluations would repeat the last round's on the same weights. :class:`ClientEvalCache` keeps each client's
result with the weights it was computed from and computes it again only when those weights changed.

What "changed" means, and why it is decided here and not by the method: the cache holds a reference to every
tensor it evaluated, and a result is reused only while the client's state dict has the same keys, each bound
to the same tensor object (``is``, safe because the held reference keeps the object, and so its ``id``,
alive) whose version counter (``Tensor._version``) has not moved. PyTorch bumps that counter on every
in-place write to the tensor or any view of it (an optimizer step, ``copy_``, ``_foreach_copy_``,
``load_state_dict`` into it, the flat buffer :func:`~fedaug.training.loop.snapshot_state`'s entries are
views of), so a model changed in place is seen, and a model replaced by new tensors (a trained client's
snapshot, a checkpoint loaded at a resume, a Flower reply) is a different object. This asks nothing of the
method: a method that said which clients it updated could forget one, and the cached number would silently
be stale. It copies nothing either (comparing with a kept copy of the weights would double the memory of K
models). Two writes are invisible to a version counter, and no fedaug code makes them to a kept model:
through ``Tensor.data`` (a separate counter) and through memory shared outside PyTorch (a NumPy array of
``torch.from_numpy``). Inference tensors have no counter at all: a state holding one is never cached.

Evaluation is deterministic (the same weights, test set, batch size and precision give the same numbers), so
a cached result is exactly the one a new evaluation would return: ``metrics.jsonl`` is the same byte for
byte. The cache lives in the engine's memory only: after a resume it starts empty and fills again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from torch import Tensor

from fedaug.types import ClientId, StateDict

T = TypeVar("T")


@dataclass(frozen=True)
class _Entry(Generic[T]):
    tensors: tuple[tuple[str, Tensor], ...]  # held: keeps every object (and its id) alive while cached
    versions: tuple[int, ...]
    result: T


def _versions(weights: StateDict) -> tuple[int, ...] | None:
    """Every tensor's version counter, in key order (None: a tensor has none, an inference tensor)."""
    try:
        return tuple(tensor._version for tensor in weights.values())
    except RuntimeError:  # "Inference tensors do not track version counter"
        return None


class ClientEvalCache(Generic[T]):
    """One result per client, reused while that client's weights are the same unchanged tensors.

    Attributes:
        computed: how many results were computed (not reused) so far, for tests and benchmarks.
    """

    def __init__(self) -> None:
        self._entries: dict[ClientId, _Entry[T]] = {}
        self.computed = 0

    def get(self, client: ClientId, weights: StateDict, compute: Callable[[], T]) -> T:
        """``compute()``'s result for ``client``'s ``weights``: the kept one while they are unchanged
        (same keys, same tensor objects, same versions), else computed now and kept."""
        versions = _versions(weights)
        entry = self._entries.get(client)
        if entry is not None and _unchanged(entry, weights, versions):
            return entry.result
        result = compute()
        self.computed += 1
        if versions is None:
            self._entries.pop(client, None)
        else:
            self._entries[client] = _Entry(tuple(weights.items()), versions, result)
        return result

    def discard_changed(self, states: Sequence[StateDict]) -> None:
        """Drops the entry of every client ``i`` whose weights ``states[i]`` changed since its result was
        kept: a result computed less often than every round (the local tests, every
        ``engine.local_eval_every`` rounds) then holds no replaced model alive in between."""
        for client, weights in enumerate(states):
            entry = self._entries.get(client)
            if entry is not None and not _unchanged(entry, weights, _versions(weights)):
                del self._entries[client]


def _unchanged(entry: _Entry[T], weights: StateDict, versions: tuple[int, ...] | None) -> bool:
    return versions == entry.versions and _same_tensors(entry.tensors, weights)


def _same_tensors(kept: tuple[tuple[str, Tensor], ...], weights: StateDict) -> bool:
    """The same keys in the same order, each bound to the very tensor object kept."""
    if len(kept) != len(weights):
        return False
    return all(
        key == name and tensor is other
        for (name, tensor), (key, other) in zip(kept, weights.items(), strict=True)
    )

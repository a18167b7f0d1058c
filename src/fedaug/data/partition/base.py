"""The :class:`Partition` record and :func:`make_partition`, the one entry point to the partitioners.

``make_partition`` resolves the number of clients (directly, or from the mean local size as in the papers:
K = N / mean_local_size), checks the partitioner's parameters against its signature, derives the random
generator from the seed, carves an optional per-client local test split, and caches the result on disk.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedaug import registry
from fedaug.data.partition import cache
from fedaug.data.partition._params import resolve_params
from fedaug.errors import ConfigError, PartitionError
from fedaug.plugins import code_digest, origin
from fedaug.runtime.log_once import info_once
from fedaug.validation import check_int, check_number

logger = logging.getLogger(__name__)

# Mixed into the seed so partition randomness is independent of every other use of the run seed.
_PARTITION_TAG = int.from_bytes(b"fedaug.partition", "big")


@dataclass(frozen=True, eq=False)
class Partition:
    """Client data as indices into the training set.

    Attributes:
        train_indices: Sorted int64 training indices of each client.
        test_indices: Sorted int64 local test indices of each client (carved from its own data), or ``None``.
        num_classes: Number of classes C.
        settings: How it was made: ``name``, ``params``, ``seed``, ``num_clients``, ``mean_local_size``,
            ``local_test_fraction``.
    """

    train_indices: list[np.ndarray]
    test_indices: list[np.ndarray] | None
    num_classes: int
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        """Number of clients K."""
        return len(self.train_indices)

    @property
    def sizes(self) -> np.ndarray:
        """Training samples per client, shape ``[K]``."""
        return np.array([idx.size for idx in self.train_indices], dtype=np.int64)

    def class_counts(self, labels: np.ndarray, *, split: str = "train") -> np.ndarray:
        """Samples per client and class, shape ``[K, C]``, of the ``"train"`` or ``"test"`` split."""
        if split not in ("train", "test"):
            raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
        parts = self.train_indices if split == "train" else self.test_indices
        if parts is None:
            raise ConfigError("this partition has no local test split (local_test_fraction was 0)")
        labels = np.asarray(labels)
        counts = [np.bincount(labels[idx], minlength=self.num_classes) for idx in parts]
        return np.stack(counts).astype(np.int64) if counts else np.zeros((0, self.num_classes), np.int64)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return (
            self.num_classes == other.num_classes
            and self.settings == other.settings
            and _same_arrays(self.train_indices, other.train_indices)
            and _same_arrays(self.test_indices, other.test_indices)
        )


def _same_arrays(first: list[np.ndarray] | None, second: list[np.ndarray] | None) -> bool:
    if first is None or second is None:
        return first is second
    return len(first) == len(second) and all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def _resolve_num_clients(num_samples: int, num_clients: int | None, mean_local_size: float | None) -> int:
    if (num_clients is None) == (mean_local_size is None):
        raise ConfigError(
            "give exactly one of num_clients and mean_local_size, "
            f"got num_clients={num_clients} and mean_local_size={mean_local_size}"
        )
    if num_clients is not None:
        if isinstance(num_clients, bool) or not isinstance(num_clients, int | np.integer):
            raise ConfigError(f"num_clients must be an int, got {num_clients!r}")
        return int(num_clients)
    check_number("mean_local_size", mean_local_size, 0, low_open=True)
    assert mean_local_size is not None
    resolved = round(num_samples / mean_local_size)
    if resolved < 1:
        raise PartitionError(
            f"mean_local_size={mean_local_size} gives num_clients = round({num_samples} / {mean_local_size}) "
            f"= {resolved}; it must be at most the number of samples ({num_samples})"
        )
    return resolved


def local_test_split(
    indices: np.ndarray, labels: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Splits one client's indices into (train, test), stratified by class.

    The client's test size is ``round(fraction * n)`` (half up), at most ``n - 1`` so that the client keeps at
    least one training sample. It is shared among the client's classes in proportion to their counts (largest
    remainder), and the test samples of each class are drawn at random.

    Args:
        indices: The client's indices.
        labels: Labels of the whole training set.
        fraction: Test fraction in ``[0, 1)``.
        rng: Source of randomness.

    Returns:
        Sorted ``(train, test)`` int64 index arrays.
    """
    num_test = min(math.floor(fraction * indices.size + 0.5), indices.size - 1)
    if num_test <= 0:
        return indices, np.zeros(0, dtype=np.int64)
    client_labels = labels[indices]
    classes, counts = np.unique(client_labels, return_counts=True)
    quota = counts * num_test / indices.size
    take = np.floor(quota).astype(np.int64)
    take[np.argsort(take - quota, kind="stable")[: num_test - int(take.sum())]] += 1
    test = np.concatenate(
        [
            rng.choice(indices[client_labels == k], size=t, replace=False)
            for k, t in zip(classes, take, strict=True)
        ]
    )
    test = np.sort(test).astype(np.int64)
    return np.setdiff1d(indices, test, assume_unique=True), test


def make_partition(
    labels: np.ndarray,
    *,
    name: str,
    num_classes: int,
    seed: int,
    num_clients: int | None = None,
    mean_local_size: float | None = None,
    local_test_fraction: float = 0.0,
    cache_dir: Path | None = None,
    groups: Mapping[str, np.ndarray] | None = None,
    **params: Any,
) -> Partition:
    """Partitions ``labels`` among clients with the registered partitioner ``name``.

    Args:
        labels: Integer label of every training sample, shape ``[N]``.
        name: Registry name of the partitioner: ``iid``, ``quantity``, ``dirichlet``, ``shards``,
            ``multimodal``, or a user-registered one.
        num_classes: Number of classes C.
        seed: Non-negative seed. The generator is ``default_rng(SeedSequence([seed, tag]))`` with a fixed
            "partition" tag, so it is independent of other uses of the seed; the partition and the local test
            split draw from separate spawned children, so the split does not change the partition.
        num_clients: Number of clients K. Give exactly one of this and ``mean_local_size``.
        mean_local_size: Average samples per client; K = round(N / mean_local_size) (papers: 100 and 50).
        local_test_fraction: Fraction in ``[0, 1)`` of each client's data held out as its local test set
            (stratified by class, see :func:`local_test_split`); 0 means no local test split.
        cache_dir: Directory for the ``.npz`` cache, or ``None`` to disable caching.
        groups: The dataset's per-sample group ids by name (``subject``, ``speaker``), for a partitioner that
            takes them (``natural``); they enter its cache key. Ignored by the others.
        **params: The partitioner's own parameters, e.g. ``alpha=0.3`` or ``classes_per_client=2``.

    Returns:
        The partition; loading it from the cache gives an identical one.

    Raises:
        ConfigError: On an unknown partitioner or parameter, a wrong type or an invalid K, seed or fraction.
        PartitionError: If the partitioner cannot partition the data with these settings.
    """
    labels = np.asarray(labels)
    num_clients = _resolve_num_clients(labels.size, num_clients, mean_local_size)
    check_int("seed", seed, 0)
    check_number("local_test_fraction", local_test_fraction, 0, 1, high_open=True)
    partitioner = registry.get("partitioner", name)
    params = resolve_params(name, partitioner, params)
    settings = {
        "name": name,
        "params": params,
        "seed": int(seed),
        "num_clients": num_clients,
        "mean_local_size": None if mean_local_size is None else float(mean_local_size),
        "local_test_fraction": float(local_test_fraction),
    }
    takes_groups = "groups" in inspect.signature(partitioner).parameters
    if takes_groups:
        params = {**params, "groups": dict(groups or {})}
    path, key, code = None, "", None
    if cache_dir is not None:
        keyed = {**settings, "groups_sha256": groups_digest(groups)} if takes_groups else settings
        key = cache.cache_key(keyed, labels, num_classes)
        path = cache.cache_path(Path(cache_dir), name, key)
        code = code_digest(partitioner)
        cached = cache.load(path, key, code, who=f"partitioner {name!r} ({origin(partitioner)})")
        if cached is not None:
            info_once(logger, "loaded partition from %s", path)
            return Partition(cached[0], cached[1], num_classes, settings)
    train, test = _draw(partitioner, labels, num_clients, num_classes, int(seed), local_test_fraction, params)
    empty = sum(idx.size == 0 for idx in train)
    if empty:
        logger.warning("partition %r left %d of %d clients without training data", name, empty, num_clients)
    if path is not None:
        cache.save(path, key, train, test, settings, code)
    return Partition(train, test, num_classes, settings)


def groups_digest(groups: Mapping[str, np.ndarray] | None) -> str:
    """sha256 over the group ids (names in sorted order, dtypes, shapes and bytes)."""
    hasher = hashlib.sha256()
    for name in sorted(groups or {}):
        array = np.ascontiguousarray(np.asarray((groups or {})[name]))
        hasher.update(f"{name}|{array.dtype}|{array.shape}|".encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()


def _draw(
    partitioner: Callable[..., list[np.ndarray]],
    labels: np.ndarray,
    num_clients: int,
    num_classes: int,
    seed: int,
    local_test_fraction: float,
    params: dict[str, Any],
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Runs the partitioner and the optional local test split on independent children of the tagged seed."""
    partition_seq, test_seq = np.random.SeedSequence([seed, _PARTITION_TAG]).spawn(2)
    rng = np.random.default_rng(partition_seq)
    output = partitioner(labels, num_clients=num_clients, num_classes=num_classes, rng=rng, **params)
    train = check_output(partitioner, output, num_clients, labels.size)
    if local_test_fraction <= 0:
        return train, None
    test_rng = np.random.default_rng(test_seq)
    pairs = [local_test_split(idx, labels, local_test_fraction, test_rng) for idx in train]
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs]


def check_output(
    partitioner: Callable[..., Any], train: Any, num_clients: int, num_samples: int
) -> list[np.ndarray]:
    """Raises PartitionError, naming the partitioner and where it is defined (a plugin's file), unless
    ``train`` is one 1-d integer index array per client with every index in ``[0, num_samples)``: a
    partitioner's bad index would otherwise surface as a torch indexing error in round 1. Returns the arrays
    as contiguous int64 copies: a view a plugin returns (``order[::-1]``, negative strides) or another integer
    dtype was a traceback from ``torch.as_tensor`` (#68)."""
    who = f"partitioner {getattr(partitioner, '__name__', '?')!r} ({origin(partitioner)})"
    if not isinstance(train, list | tuple) or len(train) != num_clients:
        got = f"{len(train)} entries" if isinstance(train, list | tuple) else type(train).__name__
        raise PartitionError(f"{who} must return one index array per client ({num_clients}), got {got}")
    for client, indices in enumerate(train):
        array = np.asarray(indices)
        if array.size == 0:
            continue
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise PartitionError(
                f"{who} must return 1-d integer index arrays, got shape {list(array.shape)} of dtype "
                f"{array.dtype} for client {client}"
            )
        low, high = int(array.min()), int(array.max())
        if low < 0 or high >= num_samples:
            bad = low if low < 0 else high
            raise PartitionError(
                f"{who} must return indices in 0..{num_samples - 1} (the training samples), got {bad} for "
                f"client {client}"
            )
    return [np.ascontiguousarray(np.asarray(indices), dtype=np.int64).reshape(-1) for indices in train]

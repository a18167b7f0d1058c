"""Checks and helpers shared by the partitioner modules (private).

A partitioner maps a label vector to one sorted ``int64`` index array per client. The helpers here
validate the common arguments, assign class sets to groups of clients (used by ``quantity`` and
``multimodal``) and split each class's samples among the clients that hold it.
"""

from __future__ import annotations

import numpy as np

from fedaug.errors import PartitionError
from fedaug.validation import check_int


def check_common(labels: np.ndarray, num_clients: int, num_classes: int) -> np.ndarray:
    """Validates the arguments every partitioner takes and returns the labels as a 1-D int64 array.

    Args:
        labels: Integer class label of every training sample, shape ``[N]``.
        num_clients: Number of clients K; must satisfy ``1 <= K <= N``.
        num_classes: Number of classes C; every label must lie in ``[0, C)``.

    Returns:
        ``labels`` as a contiguous 1-D ``int64`` array.

    Raises:
        PartitionError: If the labels are not 1-D integers in range or K is out of range.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise PartitionError(f"labels must be a 1-D array, got shape {labels.shape}")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise PartitionError(f"labels must be integers, got dtype {labels.dtype}")
    check_int("num_classes", num_classes, 1, error=PartitionError)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise PartitionError(
            f"labels must lie in [0, {num_classes}) for num_classes={num_classes}, "
            f"got range [{labels.min()}, {labels.max()}]"
        )
    num_samples = labels.size
    if num_clients < 1 or num_clients > num_samples:
        raise PartitionError(
            f"num_clients must be between 1 and the number of samples ({num_samples}), got {num_clients}"
        )
    return labels


def group_by_owner(owner: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Turns a per-sample owner vector into one sorted int64 index array per client; owner -1 means unused."""
    used = np.flatnonzero(owner >= 0)
    order = used[np.argsort(owner[used], kind="stable")].astype(np.int64)
    counts = np.bincount(owner[used], minlength=num_clients)
    return list(np.split(order, np.cumsum(counts)[:-1]))


def assign_class_sets(
    num_groups: int, num_classes: int, classes_per_group: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Draws the class set of each group: group g always holds class ``g mod C`` plus random others.

    With at least as many groups as classes every class is held (by group ``k``). With fewer groups than
    classes, class k is forced into group ``k mod G`` so that no class is left without a holder; such a group
    then holds ``max(classes_per_group, #forced)`` classes.

    Args:
        num_groups: Number of groups G (clients for ``quantity``, modes for ``multimodal``).
        num_classes: Number of classes C.
        classes_per_group: Classes q each group should hold, ``1 <= q <= C``.
        rng: Source of randomness.

    Returns:
        One sorted array of distinct class ids per group.
    """
    class_sets = []
    for group in range(num_groups):
        if num_groups >= num_classes:
            forced = np.array([group % num_classes])
        else:
            # Paper is silent for K < C (the official code drops the classes no client draws as its
            # "c mod C" class); we force class k into group k mod G so that every index is used.
            forced = np.arange(group, num_classes, num_groups)
        num_extra = max(0, classes_per_group - forced.size)
        others = np.setdiff1d(np.arange(num_classes), forced)
        extra = rng.choice(others, size=num_extra, replace=False) if num_extra else np.array([], dtype=int)
        class_sets.append(np.sort(np.concatenate([forced, extra]).astype(np.int64)))
    return class_sets


def holders_by_class(class_sets: list[np.ndarray], num_classes: int) -> list[list[int]]:
    """The clients holding each class, in client order."""
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client, classes in enumerate(class_sets):
        for k in classes:
            holders[int(k)].append(client)
    return holders


def split_among_holders(
    labels: np.ndarray, class_sets: list[np.ndarray], num_classes: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Shuffles each class's samples and splits them evenly among the clients holding that class.

    Class k's shuffled indices are cut with ``np.array_split`` into as many pieces as there are holders;
    the pieces go to the holders in client order (the FedLab/official ``quantity`` rule).

    Args:
        labels: Labels, shape ``[N]``.
        class_sets: Class ids held by each client; every class with samples must have a holder.
        num_classes: Number of classes C.
        rng: Source of randomness (one permutation per class, classes in order).

    Returns:
        One sorted int64 index array per client.
    """
    num_clients = len(class_sets)
    holders = holders_by_class(class_sets, num_classes)
    owner = np.empty(labels.size, dtype=np.int64)
    for k in range(num_classes):
        idx = rng.permutation(np.flatnonzero(labels == k))
        if idx.size and not holders[k]:
            raise PartitionError(f"class {k} has {idx.size} samples but no client holds it")
        for client, piece in zip(holders[k], np.array_split(idx, max(len(holders[k]), 1)), strict=False):
            owner[piece] = client
    return group_by_owner(owner, num_clients)

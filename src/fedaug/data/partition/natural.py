"""Natural partitioner: one client per group id of the dataset (UCI-HAR's subjects, FSDD's speakers).

The split the data come with rather than a drawn one, as FL-bench, PFLlib, Flower and fedjax offer (FEMNIST
by writer): a dataset that records who made each training sample in its ``extras`` (``<group>_train``, one
id per sample: UCI-HAR's ``subject_train``, FSDD's ``speaker_train``) is split into one client per distinct
id, clients in the order of their sorted ids. A user's own CSV or ``.npz`` gives its group ids through
``data.group_column`` / ``data.group_key`` (:mod:`fedaug.data.sources.file_groups`). ``partition.num_clients``
must be the number of ids (an error names it), at least two. Nothing is random; the label skew and the sizes
are the data's own.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedaug.data.partition._common import check_common
from fedaug.errors import PartitionError
from fedaug.registry import register

GROUP_SUFFIX = "_train"


def train_groups(extras: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The per-sample group ids of a dataset's training set, by group name (``subject`` from
    ``subject_train``)."""
    groups: dict[str, np.ndarray] = {}
    for key, value in extras.items():
        if key.endswith(GROUP_SUFFIX):
            array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
            groups[key[: -len(GROUP_SUFFIX)]] = np.asarray(array)
    return groups


@register("partitioner", "natural", summary="one client per group id of the data (subjects, speakers)")
def natural(
    labels: np.ndarray,
    *,
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
    groups: Mapping[str, np.ndarray] | None = None,
    group: str = "",
) -> list[np.ndarray]:
    """One client per distinct id of ``groups[group]``.

    Args:
        labels: Integer label of every training sample, shape ``[N]``.
        num_clients: Number of clients K; must equal the number of distinct ids.
        num_classes: Number of classes C (used for validation only).
        rng: unused (the split is the data's own).
        groups: the dataset's group ids by name, one per training sample (given by the run from the
            dataset's ``extras``; not a user option).
        group: which group ids to split by (``subject`` for UCI-HAR, ``speaker`` for FSDD); empty (default):
            the dataset's only one.

    Returns:
        One sorted int64 index array per client, clients in the order of their sorted ids.

    Raises:
        PartitionError: If the dataset has no such group ids, they do not match the labels, there are
            fewer than two ids, or K is not the number of ids.
    """
    del rng
    labels = check_common(labels, num_clients, num_classes)
    available = dict(groups or {})
    names = ", ".join(sorted(available)) or "none"
    if not group:
        if len(available) != 1:
            raise PartitionError(
                f"natural partition: set partition.group to one of the dataset's group ids ({names})"
            )
        group = next(iter(available))
    if group not in available:
        raise PartitionError(f"natural partition: the dataset has no group ids {group!r}; it has: {names}")
    ids = np.asarray(available[group]).reshape(-1)
    if ids.size != labels.size:
        raise PartitionError(f"natural partition: {ids.size} {group} ids for {labels.size} training samples")
    values, inverse = np.unique(ids, return_inverse=True)
    if values.size < 2:
        raise PartitionError(
            f"natural partition by {group}: the data have {values.size} {group} id"
            f"{'' if values.size == 1 else 's'} ({', '.join(map(str, values.tolist()))}); a federation needs "
            "at least two groups, one client each"
        )
    if values.size != num_clients:
        raise PartitionError(
            f"natural partition by {group}: the data have {values.size} {group} ids, so set "
            f"partition.num_clients={values.size}, got {num_clients}"
        )
    return [np.flatnonzero(inverse == k).astype(np.int64) for k in range(values.size)]

"""I.i.d. partitioner: a shuffled, equal split of the training set.

The i.i.d. baseline of McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data", AISTATS 2017 (arXiv:1602.05629): the data are shuffled and every client receives the same number of
samples (here: sizes differ by at most one).
"""

from __future__ import annotations

import numpy as np

from fedaug.data.partition._common import check_common
from fedaug.registry import register


@register("partitioner", "iid", summary="shuffled equal split")
def iid(
    labels: np.ndarray, *, num_clients: int, num_classes: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Shuffles all indices and splits them into ``num_clients`` near-equal parts.

    Args:
        labels: Integer label of every training sample, shape ``[N]`` (only its length is used).
        num_clients: Number of clients K, ``1 <= K <= N``.
        num_classes: Number of classes C (used for validation only).
        rng: Source of randomness; nothing else is used.

    Returns:
        One sorted int64 index array per client; sizes differ by at most one.

    Raises:
        PartitionError: If K is out of range or the labels are invalid.
    """
    labels = check_common(labels, num_clients, num_classes)
    parts = np.array_split(rng.permutation(labels.size).astype(np.int64), num_clients)
    return [np.sort(part) for part in parts]

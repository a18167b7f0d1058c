"""Shard partitioner: the pathological non-i.i.d. split of McMahan et al. (2017).

H. B. McMahan, E. Moore, D. Ramage, S. Hampson and B. Agüera y Arcas, "Communication-Efficient Learning of
Deep Networks from Decentralized Data", AISTATS 2017 (arXiv:1602.05629): sort the data by label, cut them
into ``K * s`` equal shards and give every client s random shards, so most clients see at most s classes.
Fed-ZDA (Hao et al.) calls this the "unimodal non-i.i.d." split.
"""

from __future__ import annotations

import numpy as np

from fedaug.data.partition._common import check_common
from fedaug.errors import PartitionError
from fedaug.registry import register
from fedaug.validation import check_int


@register(
    "partitioner",
    "shards",
    summary="sorted by label, equal shards dealt out (McMahan et al.; Fed-ZDA's unimodal)",
)
def shards(
    labels: np.ndarray,
    *,
    num_clients: int,
    num_classes: int,
    rng: np.random.Generator,
    shards_per_client: int = 2,
) -> list[np.ndarray]:
    """Sorts by label, cuts ``num_clients * shards_per_client`` shards and deals them out at random.

    Samples are shuffled before the stable sort by label, so the samples inside a shard are a random subset of
    their class. Shard sizes differ by at most one (``np.array_split``); a shard that straddles a class
    boundary holds two classes, as in the original.

    Args:
        labels: Integer label of every training sample, shape ``[N]``.
        num_clients: Number of clients K, ``1 <= K <= N``.
        num_classes: Number of classes C (used for validation only).
        rng: Source of randomness; nothing else is used.
        shards_per_client: Shards s per client (McMahan et al.: 2); needs ``K * s <= N``.

    Returns:
        One sorted int64 index array per client.

    Raises:
        PartitionError: If s < 1, ``K * s > N``, K is out of range or the labels are invalid.
    """
    labels = check_common(labels, num_clients, num_classes)
    num_shards = num_clients * shards_per_client
    check_int("shards_per_client", shards_per_client, 1, error=PartitionError)
    if num_shards > labels.size:
        raise PartitionError(
            f"num_clients * shards_per_client = {num_clients} * {shards_per_client} = {num_shards} shards "
            f"exceeds the number of samples ({labels.size}); use fewer clients or shards"
        )
    shuffled = rng.permutation(labels.size)
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")].astype(np.int64)
    shard_list = np.array_split(by_label, num_shards)
    dealt = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([shard_list[s] for s in row])) for row in dealt]

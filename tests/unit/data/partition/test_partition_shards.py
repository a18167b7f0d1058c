"""McMahan et al. shards (Fed-ZDA unimodal non-i.i.d.)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.data.partition import shards
from fedaug.errors import PartitionError

ValidityCheck = Callable[[list[np.ndarray], int, int], None]
CountsFn = Callable[[list[np.ndarray], np.ndarray, int], np.ndarray]


@settings(max_examples=40, deadline=None)
@given(
    shards_per_class=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    shard_size=st.integers(1, 4),
    data=st.data(),
)
def test_class_pure_shards_give_at_most_s_classes(
    shards_per_class: list[int],
    shard_size: int,
    data: st.DataObject,
    assert_valid_partition: ValidityCheck,
    class_counts: CountsFn,
) -> None:
    # Prepare: every class holds a whole number of equal shards
    total_shards = sum(shards_per_class)
    divisors = [s for s in range(1, total_shards + 1) if total_shards % s == 0]
    per_client = data.draw(st.sampled_from(divisors))
    num_clients = total_shards // per_client
    labels = np.repeat(np.arange(len(shards_per_class)), np.array(shards_per_class) * shard_size)
    seed = data.draw(st.integers(0, 10**6))
    # Execute
    parts = shards(
        labels,
        num_clients=num_clients,
        num_classes=len(shards_per_class),
        rng=np.random.default_rng(seed),
        shards_per_client=per_client,
    )
    # Assert
    assert_valid_partition(parts, labels.size, num_clients)
    assert all(part.size == per_client * shard_size for part in parts)
    counts = class_counts(parts, labels, len(shards_per_class))
    assert ((counts > 0).sum(axis=1) <= per_client).all()
    assert (counts % shard_size == 0).all()


def test_hand_example() -> None:
    # Prepare: 3 classes x 4 samples, 3 clients x 2 shards of 2 samples
    labels = np.repeat([0, 1, 2], 4)
    # Execute
    parts = shards(labels, num_clients=3, num_classes=3, rng=np.random.default_rng(0), shards_per_client=2)
    # Assert (seed 0): client 0 gets a class-0 and a class-1 shard, client 1 a class-1 and a class-2 shard,
    # client 2 the other class-0 and class-2 shards
    np.testing.assert_array_equal(parts[0], [1, 3, 4, 7])
    np.testing.assert_array_equal(parts[1], [5, 6, 8, 10])
    np.testing.assert_array_equal(parts[2], [0, 2, 9, 11])


def test_too_many_shards() -> None:
    # Execute / Assert
    with pytest.raises(PartitionError, match=r"5 \* 3 = 15 shards exceeds the number of samples \(12\)"):
        shards(
            np.zeros(12, dtype=int),
            num_clients=5,
            num_classes=1,
            rng=np.random.default_rng(0),
            shards_per_client=3,
        )

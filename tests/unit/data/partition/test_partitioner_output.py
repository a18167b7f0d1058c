"""What a partitioner returns is checked before it is used or cached (``check_output``): one 1-d integer
index array per client, every index a training sample; anything else is one PartitionError naming the
partitioner (and the plugin file it comes from), not a torch indexing error in round 1 (#68). What it
accepts comes back as contiguous int64 arrays that torch takes as they are: a reversed view
(``order[::-1]``, negative strides) was accepted and then a traceback from ``torch.as_tensor``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.data.partition.base import check_output, make_partition
from fedaug.errors import PartitionError

N, K = 10, 3


def user_partitioner(labels: np.ndarray, **_: Any) -> list[np.ndarray]:
    return []


@settings(max_examples=120, deadline=None)
@given(
    output=st.lists(
        st.one_of(
            st.lists(st.integers(-2, N + 2), max_size=4).map(lambda v: np.array(v, dtype=np.int64)),
            st.lists(st.integers(0, N - 1), max_size=4).map(lambda v: np.array(v, dtype=np.int64)[::-1]),
            st.lists(st.integers(0, N - 1), max_size=4).map(lambda v: np.array(v, dtype=np.uint8)),
            st.lists(st.integers(0, N - 1), max_size=4),  # a plain list of ints
            st.lists(st.floats(0, N - 1), min_size=1, max_size=2).map(np.array),
            st.just(np.zeros((1, 2), dtype=np.int64)),
        ),
        min_size=K - 1,
        max_size=K + 1,
    )
)
def test_a_partitioners_output_is_used_only_if_every_index_is_a_sample(output: list[np.ndarray]) -> None:
    arrays = [np.asarray(a) for a in output]
    fits = len(output) == K and all(
        a.size == 0 or (a.ndim == 1 and a.dtype.kind in "iu" and a.min() >= 0 and a.max() < N) for a in arrays
    )
    try:
        used = check_output(user_partitioner, output, K, N)
    except PartitionError as error:
        assert not fits and "partitioner 'user_partitioner' (module " in str(error) and "\n" not in str(error)
    else:
        assert fits
        for given_indices, indices in zip(arrays, used, strict=True):  # what the engine does with them
            assert torch.as_tensor(indices, dtype=torch.long).tolist() == given_indices.reshape(-1).tolist()


def test_an_index_past_the_samples_is_named() -> None:
    message = r"must return indices in 0\.\.9 \(the training samples\), got 10 for client 1"
    with pytest.raises(PartitionError, match=message):
        check_output(user_partitioner, [np.arange(2), np.array([3, 10]), np.arange(0)], K, N)


def reversed_halves(
    labels: np.ndarray, *, num_clients: int, num_classes: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """A user's partitioner that returns views with negative strides."""
    del num_classes, rng
    return list(np.array_split(np.arange(labels.size)[::-1], num_clients))


def test_a_reversed_view_is_used_as_a_copy() -> None:
    # Prepare
    (reverse,) = check_output(reversed_halves, [np.arange(4)[::-1]], 1, 4)
    # Assert: before, the view went through and torch.as_tensor raised on its negative stride
    assert reverse.flags.c_contiguous and reverse.dtype == np.int64 and reverse.tolist() == [3, 2, 1, 0]
    assert torch.as_tensor(reverse, dtype=torch.long).tolist() == [3, 2, 1, 0]


def test_a_partition_of_reversed_views_is_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    from fedaug import registry

    monkeypatch.setitem(registry._REGISTRY["partitioner"], "reversed_halves", reversed_halves)
    # Execute
    made = make_partition(np.arange(10) % 2, name="reversed_halves", num_classes=2, seed=0, num_clients=2)
    # Assert
    assert [torch.as_tensor(i, dtype=torch.long).tolist() for i in made.train_indices] == [
        [9, 8, 7, 6, 5],
        [4, 3, 2, 1, 0],
    ]

"""What a partitioner returns is checked before it is used or cached (``check_output``): one 1-d integer
index array per client, every index a training sample; anything else is one PartitionError naming the
partitioner (and the plugin file it comes from), not a torch indexing error in round 1 (#68)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.data.partition.base import check_output
from fedaug.errors import PartitionError

N, K = 10, 3


def user_partitioner(labels: np.ndarray, **_: Any) -> list[np.ndarray]:
    return []


@settings(max_examples=120, deadline=None)
@given(
    output=st.lists(
        st.one_of(
            st.lists(st.integers(-2, N + 2), max_size=4).map(lambda v: np.array(v, dtype=np.int64)),
            st.lists(st.floats(0, N - 1), min_size=1, max_size=2).map(np.array),
            st.just(np.zeros((1, 2), dtype=np.int64)),
        ),
        min_size=K - 1,
        max_size=K + 1,
    )
)
def test_a_partitioners_output_is_used_only_if_every_index_is_a_sample(output: list[np.ndarray]) -> None:
    fits = len(output) == K and all(
        a.size == 0 or (a.ndim == 1 and a.dtype.kind == "i" and a.min() >= 0 and a.max() < N) for a in output
    )
    try:
        check_output(user_partitioner, output, K, N)
    except PartitionError as error:
        assert not fits and "partitioner 'user_partitioner' (module " in str(error) and "\n" not in str(error)
    else:
        assert fits


def test_an_index_past_the_samples_is_named() -> None:
    message = r"must return indices in 0\.\.9 \(the training samples\), got 10 for client 1"
    with pytest.raises(PartitionError, match=message):
        check_output(user_partitioner, [np.arange(2), np.array([3, 10]), np.arange(0)], K, N)
